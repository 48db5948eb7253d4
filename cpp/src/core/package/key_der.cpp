#include "core/package/key_der.h"

#include <sodium.h>

#include <cstring>
#include <utility>

namespace tdaot::detail {
namespace {

// SEQUENCE { SEQUENCE { OID 1.3.101.112 } BIT STRING (0 unused bits, 32 bytes) }: RFC 8410 fixes
// every byte but the key's, so a comparison replaces a DER parser for the keys tdaot accepts.
constexpr unsigned char kEd25519Prefix[] = {0x30, 0x2a, 0x30, 0x05, 0x06, 0x03,
                                            0x2b, 0x65, 0x70, 0x03, 0x21, 0x00};
constexpr const char* kEd25519Oid = "1.3.101.112";

// A DER tag and length at `at` (bounds-checked); the content's offset and length, or nullopt.
std::optional<std::pair<size_t, size_t>> der_item(std::string_view der, size_t at, unsigned char tag) {
  if (at + 2 > der.size() || static_cast<unsigned char>(der[at]) != tag) return std::nullopt;
  size_t length = static_cast<unsigned char>(der[at + 1]);
  size_t start = at + 2;
  if (length & 0x80) {
    const size_t bytes = length & 0x7f;
    if (bytes == 0 || bytes > 3 || start + bytes > der.size()) return std::nullopt;
    length = 0;
    for (size_t i = 0; i < bytes; ++i) length = (length << 8) | static_cast<unsigned char>(der[start + i]);
    start += bytes;
  }
  if (length > der.size() - start) return std::nullopt;
  return std::make_pair(start, length);
}

// The dotted form of an OID's content bytes, or "" when they are malformed.
std::string dotted_oid(std::string_view content) {
  std::string out;
  unsigned long long value = 0;
  bool first = true;
  for (size_t i = 0; i < content.size(); ++i) {
    const auto byte = static_cast<unsigned char>(content[i]);
    if (value > (~0ull >> 8)) return "";
    value = (value << 7) | (byte & 0x7f);
    if (byte & 0x80) continue;
    if (first) {
      const unsigned long long arc = value < 80 ? value / 40 : 2;
      out = std::to_string(arc) + "." + std::to_string(value - arc * 40);
      first = false;
    } else {
      out += "." + std::to_string(value);
    }
    value = 0;
  }
  return content.empty() || (static_cast<unsigned char>(content.back()) & 0x80) ? "" : out;
}

// OpenSSL's short names for the key types a wrong key file most likely holds, as before.
std::string algorithm_name(const std::string& oid) {
  static const std::pair<const char*, const char*> kNames[] = {
      {"1.2.840.113549.1.1.1", "RSA"},   {"1.2.840.113549.1.1.10", "RSASSA-PSS"},
      {"1.2.840.10045.2.1", "id-ecPublicKey"}, {"1.2.840.10040.4.1", "DSA"},
      {"1.3.101.110", "X25519"},         {"1.3.101.111", "X448"},
      {"1.3.101.113", "ED448"},          {"1.2.840.113549.1.3.1", "dhKeyAgreement"}};
  for (const auto& [known, name] : kNames) {
    if (oid == known) return name;
  }
  return "algorithm " + oid;
}

}  // namespace

std::optional<std::string> base64_decode(std::string_view text, bool whitespace) {
  if (text.size() > (1u << 20)) return std::nullopt;
  std::string out(text.size() / 4 * 3 + 3, '\0');
  size_t length = 0;
  const char* end = nullptr;
  if (sodium_base642bin(reinterpret_cast<unsigned char*>(out.data()), out.size(), text.data(),
                        text.size(), whitespace ? " \t\r\n" : nullptr, &length, &end,
                        sodium_base64_VARIANT_ORIGINAL) != 0 ||
      end != text.data() + text.size()) {
    return std::nullopt;
  }
  out.resize(length);
  return out;
}

std::optional<PemBlock> first_pem_block(std::string_view text) {
  static constexpr std::string_view kBegin = "-----BEGIN ", kDashes = "-----";
  for (size_t at = text.find(kBegin); at != std::string_view::npos; at = text.find(kBegin, at + 1)) {
    const size_t name_at = at + kBegin.size();
    const size_t name_end = text.find(kDashes, name_at);
    const size_t line_end = text.find('\n', name_at);
    if (name_end == std::string_view::npos || name_end > line_end) continue;
    PemBlock block{std::string(text.substr(name_at, name_end - name_at)), std::nullopt};
    const std::string end_line = "-----END " + block.name + "-----";
    const size_t body_at = name_end + kDashes.size();
    const size_t end_at = text.find(end_line, body_at);
    if (end_at == std::string_view::npos) continue;
    block.der = base64_decode(text.substr(body_at, end_at - body_at), true);
    return block;
  }
  return std::nullopt;
}

std::variant<Ed25519Raw, NotEd25519> ed25519_public_key(std::string_view der) {
  const auto outer = der_item(der, 0, 0x30);
  const auto algorithm = outer ? der_item(der, outer->first, 0x30) : std::nullopt;
  const auto oid = algorithm ? der_item(der, algorithm->first, 0x06) : std::nullopt;
  if (!oid || outer->first + outer->second != der.size()) {
    return NotEd25519{"", "not a DER SubjectPublicKeyInfo"};
  }
  const std::string dotted = dotted_oid(der.substr(oid->first, oid->second));
  if (dotted.empty()) return NotEd25519{"", "a malformed algorithm identifier"};
  if (dotted != kEd25519Oid) return NotEd25519{algorithm_name(dotted), ""};
  Ed25519Raw raw{};
  if (der.size() != sizeof kEd25519Prefix + raw.size() ||
      std::memcmp(der.data(), kEd25519Prefix, sizeof kEd25519Prefix) != 0) {
    return NotEd25519{"", "an Ed25519 SubjectPublicKeyInfo is " +
                                     std::to_string(sizeof kEd25519Prefix + raw.size()) +
                                     " bytes with a fixed header; this one is " +
                                     std::to_string(der.size()) + " bytes or differs"};
  }
  std::memcpy(raw.data(), der.data() + sizeof kEd25519Prefix, raw.size());
  return raw;
}

}  // namespace tdaot::detail
