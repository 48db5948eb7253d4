// tdaot-run verify FILE [--sha256 HEX] [--public-key PUB.pem]...: checks a package or a weight
// file (told apart by content) without loading anything. A package: every file against the
// manifest's sha256 digests (and the package against --sha256, its signature against the
// public keys); prints its sha256. A weight file: what swap_weights checks before it changes
// anything but the fit to a package (and its signature against the public keys); prints the
// package it was made for and its weights' sha256.
#include <iostream>
#include <memory>

#include "common.h"

namespace tdaot::tool {
namespace {

struct VerifyOptions {
  std::string path;
  std::string expected_sha256;
  std::vector<std::string> trusted_keys;
};

const char* signed_note(const VerifyOptions& options) {
  return options.trusted_keys.empty() ? "" : "; signed by a trusted key (--public-key)";
}

ExitCode verify_package_file(const VerifyOptions& options) {
  const std::string sha256 =
      verify_package(options.path, options.expected_sha256, options.trusted_keys);
  const Manifest m = read_manifest(options.path);
  std::cout << options.path << ": " << m.files.size() << " files match their sha256 digests"
            << (options.expected_sha256.empty() ? "" : "; the package matches --sha256")
            << signed_note(options) << "\n"
            << "sha256 " << sha256 << "\n";
  return kSuccess;
}

ExitCode verify_weight_file(const VerifyOptions& options) {
  if (!options.expected_sha256.empty()) {
    throw UsageError("--sha256 pins packages; '" + options.path +
                     "' is a weight file (checked against its own digests and, with "
                     "--public-key, its signature)");
  }
  const WeightFileInfo info = verify_weights(options.path, options.trusted_keys);
  std::cout << options.path << ": weight file, its tensors match their digests"
            << signed_note(options) << "\n"
            << "for package sha256 " << info.base_sha256 << "\n"
            << "weights sha256 " << info.weights_sha256 << "\n";
  return kSuccess;
}

}  // namespace

Command add_verify(CLI::App& app) {
  auto options = std::make_shared<VerifyOptions>();
  CLI::App* command = add_command(
      app, "verify",
      "check a package's files against its manifest's sha256 digests, or a weight file's "
      "tensors against its digests; load nothing",
      options->path);
  command->get_option("package")->description(
      "path to a .pt2 package or a .tdw weight file (told apart by content)");
  add_sha256(command, options->expected_sha256);
  add_public_keys(command, options->trusted_keys);
  return {command, [options] {
            return file_kind(options->path) == FileKind::kPackage ? verify_package_file(*options)
                                                                  : verify_weight_file(*options);
          }};
}

}  // namespace tdaot::tool
