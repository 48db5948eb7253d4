// libFuzzer target: the signature and key parsers (cpp/src/core/package/signature.h):
// load_public_keys over PEM text and verify_signatures over a signatures JSON list and a
// message. An input is KEY \0 SIGNATURES \0 MESSAGE: KEY, when it holds "-----BEGIN", is one
// more trusted key's PEM text (beside a fixed Ed25519 key, the one the seeds are signed with);
// no first NUL: the file carries no signatures. A verified key id must be a trusted key's;
// anything but that or a tdaot::Error is a finding.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/package/signature.h"
#include "fuzz_support.h"

namespace {

// The public half of the Ed25519 key whose private bytes are 0, 1, ..., 31 (tests/fuzz/README.md).
constexpr const char* kFixedKey =
    "-----BEGIN PUBLIC KEY-----\n"
    "MCowBQYDK2VwAyEAA6EHv/POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg=\n"
    "-----END PUBLIC KEY-----\n";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t first = input.find('\0');
  const std::string key = input.substr(0, first);
  std::optional<std::string> signatures;
  std::string message;
  if (first != std::string::npos) {
    const size_t second = input.find('\0', first + 1);
    signatures = input.substr(first + 1, second == std::string::npos ? std::string::npos
                                                                      : second - first - 1);
    if (second != std::string::npos) message = input.substr(second + 1);
  }
  tdaot::fuzz::only_tdaot_errors("fuzz_signature", [&] {
    std::vector<std::string> keys = {kFixedKey};
    // Never a path: only PEM text reaches the key parser.
    if (key.find("-----BEGIN") != std::string::npos) keys.push_back(key);
    const auto trusted = tdaot::detail::load_public_keys(keys, "fuzz.pt2");
    const std::string id = tdaot::detail::verify_signatures(
        message, signatures, trusted, {"fuzz.pt2", "package 'fuzz.pt2'", "manifest"});
    bool known = false;
    for (const auto& k : trusted) known = known || k.id == id;
    if (!known) tdaot::fuzz::fail("fuzz_signature", "verified by key id " + id + ", not a trusted key");
    tdaot::fuzz::note("verified by " + id);
  });
  return 0;
}
