// Ed25519 verification with OpenSSL's EVP interface (see signature.h for the format).
#include "core/package/signature.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/objects.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/package/digest.h"
#include "tdaot/errors.h"

namespace tdaot::detail {
namespace {

namespace fs = std::filesystem;

// A PEM public key is a few hundred bytes; anything far larger is not one.
constexpr uintmax_t kMaxKeyBytes = 64u << 10;
constexpr size_t kSignatureBytes = 64;
constexpr size_t kRawKeyBytes = 32;

// OpenSSL's reason for the last failure, and its error queue emptied for the next caller.
std::string openssl_error() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "no reason given";
  std::array<char, 256> text{};
  ERR_error_string_n(code, text.data(), text.size());
  return text.data();
}

struct PemBlock {
  std::string name;  // "PUBLIC KEY", "PRIVATE KEY", ...
  std::string der;
};

// The first PEM block of `text`, or nullopt when there is none.
std::optional<PemBlock> first_pem_block(const std::string& text) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(text.data(), static_cast<int>(text.size())), &BIO_free);
  char* name = nullptr;
  char* header = nullptr;
  unsigned char* data = nullptr;
  long length = 0;
  if (!bio || PEM_read_bio(bio.get(), &name, &header, &data, &length) != 1) {
    ERR_clear_error();
    return std::nullopt;
  }
  PemBlock block{name,
                 std::string(reinterpret_cast<const char*>(data), static_cast<size_t>(length))};
  OPENSSL_free(name);
  OPENSSL_free(header);
  OPENSSL_free(data);
  return block;
}

[[noreturn]] void refuse_key(const std::string& path, const std::string& origin,
                             const std::string& problem) {
  throw SignatureError(path, origin + " " + problem);
}

std::string read_key_file(const std::string& file, const std::string& origin,
                          const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(file, ec);
  if (status.type() == fs::file_type::not_found) refuse_key(path, origin, "does not exist");
  if (ec) refuse_key(path, origin, "cannot be accessed: " + ec.message());
  if (!fs::is_regular_file(status)) {
    refuse_key(path, origin, "is not a regular file (expected a PEM public key)");
  }
  if (fs::file_size(file, ec) > kMaxKeyBytes) {
    refuse_key(path, origin, "is too large to be a PEM public key");
  }
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) refuse_key(path, origin, std::string("cannot be read: ") + std::strerror(errno));
  return text.str();
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

PublicKey load_public_key(const std::string& given, size_t index, const std::string& path) {
  PublicKey key;
  const bool pem_text = given.find("-----BEGIN") != std::string::npos;
  key.origin = pem_text ? "trusted key #" + std::to_string(index + 1) + " (PEM text)"
                        : "trusted key file '" + given + "'";
  if (pem_text && given.size() > kMaxKeyBytes) {
    refuse_key(path, key.origin, "is too large to be a PEM public key");
  }
  const std::string text = pem_text ? given : read_key_file(given, key.origin, path);
  const std::optional<PemBlock> block = first_pem_block(text);
  if (!block) {
    refuse_key(path, key.origin, "is not a PEM public key (no '-----BEGIN PUBLIC KEY-----' block)");
  }
  if (ends_with(block->name, "PRIVATE KEY")) {
    refuse_key(path, key.origin,
               "holds a private key ('" + block->name + "'); trusted keys are public keys: give "
               "the public key made with it (tdaot keygen writes public.pem) and keep the "
               "private key off the machines that verify");
  }
  if (block->name != "PUBLIC KEY") {
    refuse_key(path, key.origin, "holds a PEM '" + block->name + "' block, not a 'PUBLIC KEY'");
  }
  const auto* der = reinterpret_cast<const unsigned char*>(block->der.data());
  key.key.reset(d2i_PUBKEY(nullptr, &der, static_cast<long>(block->der.size())), &EVP_PKEY_free);
  if (!key.key) refuse_key(path, key.origin, "is not a valid public key: " + openssl_error());
  const int type = EVP_PKEY_base_id(key.key.get());
  if (type != EVP_PKEY_ED25519) {
    const char* name = OBJ_nid2sn(type);
    refuse_key(path, key.origin,
               "is a " + std::string(name != nullptr ? name : "non-Ed25519") +
                   " key; tdaot signatures are Ed25519 (tdaot keygen makes a key pair)");
  }
  std::array<unsigned char, kRawKeyBytes> raw{};
  size_t raw_length = raw.size();
  if (EVP_PKEY_get_raw_public_key(key.key.get(), raw.data(), &raw_length) != 1 ||
      raw_length != kRawKeyBytes) {
    refuse_key(path, key.origin, "cannot be read as a raw Ed25519 key: " + openssl_error());
  }
  key.id = sha256_hex(std::string_view(reinterpret_cast<const char*>(raw.data()), raw_length));
  return key;
}

// `text` decoded from base64, or nullopt when it is not base64.
std::optional<std::string> base64_decode(const std::string& text) {
  if (text.empty() || text.size() % 4 != 0 || text.size() > 1024) return std::nullopt;
  std::string out(text.size() / 4 * 3, '\0');
  const int length = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                     reinterpret_cast<const unsigned char*>(text.data()),
                                     static_cast<int>(text.size()));
  if (length < 0) {
    ERR_clear_error();
    return std::nullopt;
  }
  // EVP_DecodeBlock counts the padding as zero bytes.
  const size_t padding = text.size() - text.find_last_not_of('=') - 1;
  if (padding > 2) return std::nullopt;
  out.resize(static_cast<size_t>(length) - padding);
  return out;
}

bool ed25519_verifies(EVP_PKEY* key, std::string_view message, const std::string& signature) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(),
                                                                  &EVP_MD_CTX_free);
  // Ed25519 hashes the message itself: no digest is given, and only the one-shot call works.
  if (!context || EVP_DigestVerifyInit(context.get(), nullptr, nullptr, nullptr, key) != 1) {
    throw Error("OpenSSL could not set up an Ed25519 verification: " + openssl_error());
  }
  const int verified = EVP_DigestVerify(
      context.get(), reinterpret_cast<const unsigned char*>(signature.data()), signature.size(),
      reinterpret_cast<const unsigned char*>(message.data()), message.size());
  ERR_clear_error();
  return verified == 1;
}

[[noreturn]] void refuse(const SignedFile& file, const std::string& problem) {
  throw SignatureError(file.path, file.what + " " + problem);
}

std::string key_ids(const std::vector<PublicKey>& keys) {
  std::string out;
  for (const PublicKey& key : keys) out += (out.empty() ? "" : ", ") + key.id;
  return out;
}

}  // namespace

std::vector<PublicKey> load_public_keys(const std::vector<std::string>& keys,
                                        const std::string& path) {
  std::vector<PublicKey> loaded;
  for (size_t i = 0; i < keys.size(); ++i) loaded.push_back(load_public_key(keys[i], i, path));
  return loaded;
}

std::string verify_signatures(std::string_view message,
                              const std::optional<std::string>& signatures_json,
                              const std::vector<PublicKey>& trusted, const SignedFile& file) {
  if (trusted.empty()) throw InternalError("verify_signatures needs at least one trusted key");
  const std::string trusted_ids = "trusted key ids: " + key_ids(trusted);
  if (!signatures_json) {
    refuse(file, "is not signed, but trusted keys are set (" + trusted_ids +
                     "); refusing it (sign it with `tdaot sign`)");
  }
  nlohmann::json signatures;
  try {
    signatures = nlohmann::json::parse(*signatures_json);
  } catch (const nlohmann::json::exception& e) {
    refuse(file, std::string("has malformed signatures (not JSON: ") + e.what() + ")");
  }
  if (!signatures.is_array()) refuse(file, "has malformed signatures (expected a JSON list)");
  std::vector<std::string> untrusted;
  std::vector<std::string> unsupported;
  const PublicKey* mismatched = nullptr;
  for (size_t i = 0; i < signatures.size(); ++i) {
    const std::string number = "#" + std::to_string(i + 1);
    const nlohmann::json& entry = signatures[i];
    for (const char* name : {"key_id", "alg", "signature"}) {
      if (!entry.is_object() || !entry.contains(name) || !entry[name].is_string()) {
        refuse(file, "has a malformed signature " + number + " (no string '" + name +
                         "'; expected {key_id, alg, signature})");
      }
    }
    const std::string id = lowercase(entry["key_id"].get<std::string>());
    const std::string alg = entry["alg"].get<std::string>();
    const PublicKey* key = nullptr;
    for (const PublicKey& candidate : trusted) {
      if (candidate.id == id) key = &candidate;
    }
    if (alg != kSignatureAlgorithm) {
      // Not "untrusted": the key may well be trusted; its algorithm is what tdaot cannot check.
      unsupported.push_back("signature " + number + " by key id " + id + " uses algorithm '" +
                            alg + "'");
      continue;
    }
    if (key == nullptr) {
      untrusted.push_back(id);
      continue;
    }
    const std::optional<std::string> signature =
        base64_decode(entry["signature"].get<std::string>());
    if (!signature || signature->size() != kSignatureBytes) {
      refuse(file, "has a malformed signature " + number + " by trusted key " + id +
                       " (not the base64 of 64 bytes)");
    }
    // Any one valid signature by a trusted key is enough.
    if (ed25519_verifies(key->key.get(), message, *signature)) return key->id;
    mismatched = key;
  }
  if (mismatched != nullptr) {
    refuse(file, "has a signature by trusted key " + mismatched->id + " (" + mismatched->origin +
                     ") that does not match its " + file.content + ": the " + file.content +
                     " was changed after it was signed; refusing it");
  }
  if (!unsupported.empty()) {
    std::string which;
    for (const std::string& text : unsupported) which += (which.empty() ? "" : "; ") + text;
    refuse(file, "has no signature tdaot can verify: " + which + ", which is not supported (tdaot verifies '" +
                     std::string(kSignatureAlgorithm) + "' signatures only; " + trusted_ids +
                     (untrusted.empty() ? "" : "; untrusted key ids also present") + ")");
  }
  if (untrusted.empty()) refuse(file, "carries an empty signature list (" + trusted_ids + ")");
  std::string ids;
  for (const std::string& id : untrusted) ids += (ids.empty() ? "" : ", ") + id;
  refuse(file, "is signed only by keys that are not trusted (key ids: " + ids + "; " +
                   trusted_ids + ")");
}

std::string verify_signatures(std::string_view message,
                              const std::optional<std::string>& signatures_json,
                              const std::vector<std::string>& trusted_keys,
                              const SignedFile& file) {
  return verify_signatures(message, signatures_json, load_public_keys(trusted_keys, file.path),
                           file);
}

}  // namespace tdaot::detail
