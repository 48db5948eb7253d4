#include "core/package/digest.h"

#include <sodium.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <stdexcept>
#include <utility>

namespace tdaot::detail {
namespace {

// libsodium rather than OpenSSL: OpenSSL 3's provider set-up for one sha256 holds ~2 MiB resident
// in the lite runtime (benchmarks/README.md, "Lite footprint"). sodium_init is idempotent and
// thread-safe; sha256 needs it only for libsodium's own contract.
void sodium_ready() {
  static const bool ready = sodium_init() >= 0;
  if (!ready) throw std::runtime_error("libsodium could not be initialised");
}

// The sha256 of `data`, its 32 bytes.
Sha256Raw sha256_raw(std::string_view data) {
  sodium_ready();
  Sha256Raw digest{};
  crypto_hash_sha256(digest.data(), reinterpret_cast<const unsigned char*>(data.data()), data.size());
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

Sha256::Sha256() : state_(std::make_unique<crypto_hash_sha256_state>()) {
  sodium_ready();
  crypto_hash_sha256_init(state_.get());
}

Sha256::Sha256(std::unique_ptr<crypto_hash_sha256_state> state) : state_(std::move(state)) {}

Sha256::~Sha256() = default;

Sha256::Sha256(Sha256&& other) noexcept = default;

Sha256 Sha256::fork() const {
  // The state is a plain struct: a copy is an independent hash of everything fed so far.
  return Sha256(std::make_unique<crypto_hash_sha256_state>(*state_));
}

void Sha256::update(std::string_view data) {
  crypto_hash_sha256_update(state_.get(), reinterpret_cast<const unsigned char*>(data.data()),
                            data.size());
}

Sha256Raw Sha256::raw() {
  Sha256Raw out{};
  crypto_hash_sha256_final(state_.get(), out.data());
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
