#include "core/package/digest.h"

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <stdexcept>
#include <utility>

namespace tdaot::detail {
namespace {

[[noreturn]] void openssl_failed() {
  throw std::runtime_error("OpenSSL could not compute a sha256 digest");
}

// Fetched once: EVP_sha256() makes OpenSSL 3 look the algorithm up again on every use, which
// costs more than hashing one of the small blocks a package file is checked in.
const EVP_MD* sha256_md() {
  static const EVP_MD* md = [] {
    const EVP_MD* fetched = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    return fetched != nullptr ? fetched : EVP_sha256();
  }();
  return md;
}

// The sha256 of `data`, its 32 bytes.
Sha256Raw sha256_raw(std::string_view data) {
  Sha256Raw digest{};
  unsigned int length = 0;
  // EVP_Digest is OpenSSL's one-shot interface; sha256 cannot fail on valid memory.
  if (EVP_Digest(data.data(), data.size(), digest.data(), &length, sha256_md(), nullptr) != 1) {
    openssl_failed();
  }
  return digest;
}

}  // namespace

std::string to_hex(const Sha256Raw& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * digest.size());
  for (unsigned char byte : digest) {
    hex.push_back(kHex[byte >> 4]);
    hex.push_back(kHex[byte & 0xf]);
  }
  return hex;
}

std::string sha256_hex(std::string_view data) { return to_hex(sha256_raw(data)); }

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr || EVP_DigestInit_ex(ctx_, sha256_md(), nullptr) != 1) {
    EVP_MD_CTX_free(ctx_);
    openssl_failed();
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

Sha256::Sha256(Sha256&& other) noexcept : ctx_(std::exchange(other.ctx_, nullptr)) {}

Sha256 Sha256::fork() const {
  EVP_MD_CTX* copy = EVP_MD_CTX_new();
  if (copy == nullptr || EVP_MD_CTX_copy_ex(copy, ctx_) != 1) {
    EVP_MD_CTX_free(copy);
    openssl_failed();
  }
  return Sha256(copy);
}

void Sha256::update(std::string_view data) {
  if (EVP_DigestUpdate(ctx_, data.data(), data.size()) != 1) openssl_failed();
}

Sha256Raw Sha256::raw() {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(ctx_, digest.data(), &length) != 1 || length != 32) openssl_failed();
  Sha256Raw out{};
  std::copy(digest.begin(), digest.begin() + 32, out.begin());
  return out;
}

bool is_sha256_hex(std::string_view text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

std::string lowercase(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace tdaot::detail
