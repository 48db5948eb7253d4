// Ed25519 verification with libsodium (see signature.h for the format). libsodium, not OpenSSL:
// the lite runtime then maps no libcrypto (benchmarks/README.md, "Lite footprint"); the PEM and
// DER handling an Ed25519 public key needs is small enough to do here (key_der.cpp).
#include "core/package/signature.h"

#include <sodium.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <variant>

#include "core/package/digest.h"
#include "core/package/key_der.h"
#include "tdaot/errors.h"

namespace tdaot::detail {
namespace {

namespace fs = std::filesystem;

// A PEM public key is a few hundred bytes; anything far larger is not one.
constexpr uintmax_t kMaxKeyBytes = 64u << 10;
constexpr size_t kSignatureBytes = crypto_sign_BYTES;

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
  if (!block->der) {
    refuse_key(path, key.origin, "is not a valid public key: its PEM body is not base64");
  }
  const auto read = ed25519_public_key(*block->der);
  if (const auto* refused = std::get_if<NotEd25519>(&read)) {
    if (!refused->problem.empty()) {
      refuse_key(path, key.origin, "is not a valid public key: " + refused->problem);
    }
    refuse_key(path, key.origin,
               "is a " + refused->algorithm +
                   " key; tdaot signatures are Ed25519 (tdaot keygen makes a key pair)");
  }
  key.key = std::get<Ed25519Raw>(read);
  key.id = sha256_hex(std::string_view(reinterpret_cast<const char*>(key.key.data()), key.key.size()));
  return key;
}

bool ed25519_verifies(const Ed25519Raw& key, std::string_view message,
                      const std::string& signature) {
  // sodium_init is idempotent and thread-safe; libsodium asks for it before any other call.
  if (sodium_init() < 0) throw Error("libsodium could not be initialised");
  return crypto_sign_verify_detached(reinterpret_cast<const unsigned char*>(signature.data()),
                                     reinterpret_cast<const unsigned char*>(message.data()),
                                     message.size(), key.data()) == 0;
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
        base64_decode(entry["signature"].get<std::string>(), false);
    if (!signature || signature->size() != kSignatureBytes) {
      refuse(file, "has a malformed signature " + number + " by trusted key " + id +
                       " (not the base64 of 64 bytes)");
    }
    // Any one valid signature by a trusted key is enough.
    if (ed25519_verifies(key->key, message, *signature)) return key->id;
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
