// Internal: sha256 digests (libsodium) as lowercase hex, the form manifests and
// PolicyOptions::expected_sha256 use.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <string_view>

struct crypto_hash_sha256_state;

namespace tdaot::detail {

// The sha256 of `data` as 64 lowercase hex digits.
std::string sha256_hex(std::string_view data);

using Sha256Raw = std::array<unsigned char, 32>;

// `digest` as 64 lowercase hex digits.
std::string to_hex(const Sha256Raw& digest);

// A sha256 fed in pieces (a file read in blocks, an entry streamed out of an archive).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&& other) noexcept;
  Sha256& operator=(Sha256&&) = delete;
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  // A copy of the state (everything fed so far), to be fed or finished on its own.
  Sha256 fork() const;
  void update(std::string_view data);
  // The digest of everything fed; finishes, so call one of them once.
  Sha256Raw raw();
  std::string hex() { return to_hex(raw()); }

 private:
  explicit Sha256(std::unique_ptr<crypto_hash_sha256_state> state);
  std::unique_ptr<crypto_hash_sha256_state> state_;
};

// True for 64 hex digits (either case).
bool is_sha256_hex(std::string_view text);

// `text` lowercased, for comparing digests a user typed in either case.
std::string lowercase(std::string_view text);

}  // namespace tdaot::detail
