// Internal: Ed25519 signatures (libsodium) over any message, and the trusted public keys that
// verify them. A signed file carries its signatures as JSON, a list of
//   {"key_id": sha256 of the raw 32-byte public key (hex), "alg": "ed25519",
//    "signature": base64 of the 64-byte signature}
// so one file can carry the signatures of several keys. Packages store that list in their
// "tdaot.sig" entry and sign their manifest bytes (package.cpp); nothing here knows packages.
// Python signs (tdaot.signing, the `cryptography` package); the runtime only verifies.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/package/key_der.h"

namespace tdaot::detail {

inline constexpr const char* kSignatureAlgorithm = "ed25519";

// A trusted Ed25519 public key.
struct PublicKey {
  std::string id;      // sha256 of the raw public key, 64 lowercase hex digits
  std::string origin;  // for messages: "key file 'keys/public.pem'" or "trusted key #2 (PEM text)"
  Ed25519Raw key{};
};

// Loads each of `keys`, a PEM text (it holds "-----BEGIN") or the path of a PEM file, as an
// Ed25519 public key. Throws SignatureError (its path(): `path`, the file being verified) naming
// the key: a missing or unreadable file, no PEM block, a private key (trusted keys are public:
// a private key does not belong on the machines that verify), another PEM block or key type.
std::vector<PublicKey> load_public_keys(const std::vector<std::string>& keys,
                                        const std::string& path);

// The file whose signatures are verified, for messages.
struct SignedFile {
  std::string path;     // SignatureError::path()
  std::string what;     // how messages start: "package 'p.pt2'"
  std::string content;  // what the signature signs, for messages: "manifest"
};

// Checks that `signatures_json` (nullopt: the file carries none) holds a valid Ed25519 signature
// of `message` by one of `trusted` (not empty). Returns the id of that key. Otherwise throws
// SignatureError naming `file`: unsigned, malformed signatures, signed only by untrusted keys
// (naming their ids), or a trusted key's signature that does not match `message` (it was
// changed after signing).
std::string verify_signatures(std::string_view message,
                              const std::optional<std::string>& signatures_json,
                              const std::vector<PublicKey>& trusted, const SignedFile& file);

// load_public_keys, then verify_signatures.
std::string verify_signatures(std::string_view message,
                              const std::optional<std::string>& signatures_json,
                              const std::vector<std::string>& trusted_keys, const SignedFile& file);

}  // namespace tdaot::detail
