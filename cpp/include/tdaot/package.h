// Reading and checking a tdaot package file without running it: which files a service accepts
// (PackageOptions), and the checks of a package or weight file that need no model loaded. Shared
// by the full runtime (tdaot/policy.h, libtorch) and the lite runtime (tdaot/lite.h): torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tdaot {

// Which package files are accepted, and where they are unpacked: tdaot::PolicyOptions and
// tdaot::lite::PolicyOptions extend it.
struct PackageOptions {
  // Pins the artifact: the sha256 of the whole package file (64 hex digits, either case), as
  // `sha256sum` prints it and tdaot's build report records it. When set, any other file is
  // refused with IntegrityError before anything in it is read. Empty accepts any package whose
  // files match the digests in its own manifest (always checked).
  std::string expected_sha256;
  // Public keys whose signatures this service trusts, each a PEM text ("-----BEGIN PUBLIC
  // KEY-----...") or the path of a PEM file (tdaot keygen writes public.pem). When set, a package
  // without a valid Ed25519 signature of its manifest by one of them is refused with
  // SignatureError right after its manifest is read: before the host checks, before any op
  // library or model is loaded and before anything is extracted. A key that cannot be used (a
  // missing or garbage file, a private key, not Ed25519) is a SignatureError naming it. Empty:
  // signatures are not looked at (the file digests and expected_sha256 still apply).
  std::vector<std::string> trusted_keys;
  // Where the package's files are extracted for loading: a private directory (mode 0700,
  // "tdaot-XXXXXX") is created under it and removed again once the model is loaded (for
  // CUDA packages, whose kernels load lazily, when the Policy is destroyed). Empty: $TMPDIR,
  // else /tmp. It must allow executable mappings (not be mounted noexec).
  std::string temp_dir;
  // The largest package file, and the most bytes its entries may declare unpacked, that
  // loading accepts (the file is read once in full for its sha256; it is never held in memory
  // whole). Default 4 GiB.
  uint64_t max_package_bytes = uint64_t{4} << 30;
};

// Checks a package without loading it: the file's sha256 against `expected_sha256` (when not
// empty), its zip structure and manifest, its signature when `trusted_keys` is not empty (see
// PackageOptions::trusted_keys), and every file against the digest its manifest records. Returns
// the package's sha256; throws what the Policy constructor throws for these.
std::string verify_package(const std::string& package_path, const std::string& expected_sha256 = "",
                           const std::vector<std::string>& trusted_keys = {});

// The two kinds of tdaot file, told apart by their content (not their name).
enum class FileKind {
  kPackage,  // a .pt2 package: a zip archive
  kWeights,  // a .tdw weight file (tdaot.export_weights): safetensors
};
// The kind of the file at `path`, from its first bytes. Throws PackageError naming the path
// when it cannot be read or is neither (nothing more is checked: see verify_package and
// verify_weights).
FileKind file_kind(const std::string& path);

}  // namespace tdaot
