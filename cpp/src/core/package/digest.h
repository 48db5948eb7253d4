// Internal: sha256 digests (OpenSSL's libcrypto) as lowercase hex, the form manifests and
// PolicyOptions::expected_sha256 use.
#pragma once

#include <string>
#include <string_view>

namespace tdaot::detail {

// The sha256 of `data` as 64 lowercase hex digits.
std::string sha256_hex(std::string_view data);

// True for 64 hex digits (either case).
bool is_sha256_hex(std::string_view text);

// `text` lowercased, for comparing digests a user typed in either case.
std::string lowercase(std::string_view text);

}  // namespace tdaot::detail
