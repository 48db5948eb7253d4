// Internal: the PEM and DER reading an Ed25519 public key needs, without OpenSSL (signature.cpp
// verifies with libsodium). Keys are PEM SubjectPublicKeyInfo blocks, as OpenSSL and Python's
// `cryptography` write them; an Ed25519 one is always the same 12 DER bytes and the 32-byte key.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace tdaot::detail {

struct PemBlock {
  std::string name;                // "PUBLIC KEY", "PRIVATE KEY", ...
  std::optional<std::string> der;  // nullopt: its body is not base64
};

// The first "-----BEGIN <name>-----" ... "-----END <name>-----" block of `text`, or nullopt.
std::optional<PemBlock> first_pem_block(std::string_view text);

// `text` decoded from padded standard base64 (whitespace skipped when `whitespace`), or nullopt.
std::optional<std::string> base64_decode(std::string_view text, bool whitespace);

using Ed25519Raw = std::array<unsigned char, 32>;

// Why a DER SubjectPublicKeyInfo holds no Ed25519 key.
struct NotEd25519 {
  std::string algorithm;  // another key type: OpenSSL's short name ("id-ecPublicKey") or its OID
  std::string problem;    // otherwise: what is wrong with the bytes
};

// The raw key of an Ed25519 SubjectPublicKeyInfo, or why `der` is not one.
std::variant<Ed25519Raw, NotEd25519> ed25519_public_key(std::string_view der);

}  // namespace tdaot::detail
