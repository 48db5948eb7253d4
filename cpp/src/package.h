// Internal: reading a .pt2 package the safe way. The file is read into memory once, and
// everything is checked on those bytes: the digest of the whole file (pinning), the zip
// structure (archive.h), the manifest, and the sha256 of every file the manifest lists. Only
// then are the model's files written, from the same bytes, into a private temporary directory
// whose library AOTInductor's runner loads. AOTInductor's own package loader is not used: it
// extracts entries by their stored names (a '../' entry escapes its directory, reproduced with
// torch 2.13), always under /tmp, and checks no digests.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <unordered_map>

#include "tdaot/manifest.h"
#include "tdaot/types.h"

namespace tdaot::detail {

class ZipArchive;
struct ZipEntry;

using Metadata = std::unordered_map<std::string, std::string>;

// The model's files written out of a package into a private directory (mode 0700), which
// is removed with this object.
class ExtractedModel {
 public:
  explicit ExtractedModel(std::string directory) : directory_(std::move(directory)) {}
  ~ExtractedModel();
  ExtractedModel(ExtractedModel&& other) noexcept;
  ExtractedModel& operator=(ExtractedModel&&) = delete;
  ExtractedModel(const ExtractedModel&) = delete;
  ExtractedModel& operator=(const ExtractedModel&) = delete;

  const std::string& directory() const { return directory_; }
  std::string library;       // the compiled model (.so)
  std::string weights_blob;  // a weights blob stored beside the library, if the package has one

 private:
  std::string directory_;
};

class Package {
 public:
  // Reads `path` and checks, in this order: the file (exists, regular, at most
  // options.max_package_bytes), the sha256 of the whole file when options.expected_sha256 is
  // set (IntegrityError), the zip structure (PackageError), the AOTInductor metadata of model
  // options.model_name and the manifest in it (ManifestError). File digests are checked by
  // verify_files / extract.
  Package(std::string path, const PolicyOptions& options);
  ~Package();
  Package(const Package&) = delete;
  Package& operator=(const Package&) = delete;

  const std::string& path() const { return path_; }
  // The sha256 of the whole package file, 64 lowercase hex digits.
  const std::string& sha256() const { return sha256_; }
  const Metadata& metadata() const { return metadata_; }
  const Manifest& manifest() const { return manifest_; }

  // Checks that every file of the package has the sha256 its manifest records, that the
  // package holds no file the manifest does not list (beyond the metadata that carries the
  // manifest and the zip writer's bookkeeping) and lacks none it lists. Throws IntegrityError.
  void verify_files() const;

  // verify_files, and writes the model's files into a new private directory under
  // `parent_dir` ($TMPDIR or /tmp when empty). Nothing is written before an entry's digest
  // matched, and the directory is removed again when anything fails.
  ExtractedModel extract(const std::string& parent_dir) const;

 private:
  // Checks every file's digest; with a destination, writes the model's files into it.
  void check_files(ExtractedModel* destination) const;
  std::string relative_name(const ZipEntry& entry) const;
  [[noreturn]] void fail(const std::string& problem) const;

  std::string path_;
  std::string bytes_;
  std::string sha256_;
  std::unique_ptr<ZipArchive> archive_;
  std::string prefix_;     // the archive's top folder with its '/' ("package/")
  std::string model_dir_;  // "data/aotinductor/<model>/", relative to the top folder
  Metadata metadata_;
  Manifest manifest_;
};

// Parses the manifest stored under kManifestMetadataKey; throws ManifestError naming the path.
Manifest manifest_from_metadata(const Metadata& metadata, const std::string& path);

// e.what() without the C++ backtrace c10::Error appends, for one-line messages.
std::string exception_text(const std::exception& e);

}  // namespace tdaot::detail
