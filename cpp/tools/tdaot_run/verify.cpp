// tdaot-run verify PKG [--sha256 HEX] [--public-key PUB.pem]...: every file against the manifest's
// sha256 digests (and the package against --sha256, its signature against the public keys)
// without loading anything; prints the package's sha256.
#include <iostream>
#include <memory>

#include "common.h"

namespace tdaot::tool {
namespace {

struct VerifyOptions {
  std::string package;
  std::string expected_sha256;
  std::vector<std::string> trusted_keys;
};

ExitCode verify(const VerifyOptions& options) {
  const std::string sha256 =
      verify_package(options.package, options.expected_sha256, options.trusted_keys);
  const Manifest m = read_manifest(options.package);
  std::cout << options.package << ": " << m.files.size() << " files match their sha256 digests"
            << (options.expected_sha256.empty() ? "" : "; the package matches --sha256")
            << (options.trusted_keys.empty() ? "" : "; signed by a trusted key (--public-key)")
            << "\n"
            << "sha256 " << sha256 << "\n";
  return kSuccess;
}

}  // namespace

Command add_verify(CLI::App& app) {
  auto options = std::make_shared<VerifyOptions>();
  CLI::App* command = add_command(
      app, "verify", "check every file against the manifest's sha256 digests, load nothing",
      options->package);
  add_sha256(command, options->expected_sha256);
  add_public_keys(command, options->trusted_keys);
  return {command, [options] { return verify(*options); }};
}

}  // namespace tdaot::tool
