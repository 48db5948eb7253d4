// Internal: reading a .pt2 package the safe way. The file is read once in full for its digest
// (pinning), then only where needed, through the same descriptor (archive.h, PackageFile): the
// zip structure, the manifest and signatures, each read checked against that first read, and
// the files of the models loaded, streamed out of the archive, each hashed as it is written
// into a private temporary directory and refused (the directory removed) unless it has the
// sha256 the manifest lists, before any of it is loaded. The process never holds the whole
// package, so loading costs no memory for the models it does not load. AOTInductor's own
// package loader is not used: it extracts entries by their stored names (a '../' entry escapes
// its directory, reproduced with torch 2.13), always under /tmp, and checks no digests.
#pragma once

#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "tdaot/manifest.h"
#include "tdaot/package.h"

namespace tdaot::detail {

class PackageFile;
class ZipArchive;
struct ZipEntry;

using Metadata = std::unordered_map<std::string, std::string>;

// One model's files written out of a package: its own folder ("data/aotinductor/<name>/") and
// the shared "data/constants/" folder, flat in one subdirectory of an Extraction.
struct ExtractedModel {
  std::string name;
  std::string directory;
  std::string library;       // the compiled model (.so)
  std::string weights_blob;  // a weights blob stored beside the library, if the package has one
};

// The files of some models of a package, written into a private directory (mode 0700) that is
// removed with this object.
class Extraction {
 public:
  explicit Extraction(std::string directory) : directory_(std::move(directory)) {}
  ~Extraction();
  Extraction(Extraction&& other) noexcept;
  Extraction& operator=(Extraction&&) = delete;
  Extraction(const Extraction&) = delete;
  Extraction& operator=(const Extraction&) = delete;

  const std::string& directory() const { return directory_; }
  // The model named `name` (it was extracted).
  const ExtractedModel& model(const std::string& name) const;
  std::vector<ExtractedModel> models;  // in the order extract() was given them

 private:
  std::string directory_;
};

class Package {
 public:
  // Reads `path` and checks, in this order: the file (exists, regular, at most
  // options.max_package_bytes), the sha256 of the whole file when options.expected_sha256 is
  // set (IntegrityError), the zip structure (PackageError), the AOTInductor metadata and the
  // manifest in it (ManifestError): every model the manifest lists has metadata carrying the
  // same manifest, and the package holds no model it does not list. File digests are checked
  // by verify_files / extract. With options.trusted_keys, the manifest's signature is checked
  // right after the manifest (SignatureError), before the caller checks the host or loads
  // anything.
  Package(std::string path, const PackageOptions& options);
  ~Package();
  Package(const Package&) = delete;
  Package& operator=(const Package&) = delete;

  const std::string& path() const { return path_; }
  // The sha256 of the whole package file, 64 lowercase hex digits.
  const std::string& sha256() const;
  // The AOTInductor metadata of the manifest's first model.
  const Metadata& metadata() const { return metadata_.at(manifest_.models.front().name); }
  // The AOTInductor metadata of the listed model `model`.
  const Metadata& metadata(const std::string& model) const { return metadata_.at(model); }
  const Manifest& manifest() const { return manifest_; }
  // The manifest JSON exactly as stored: what the package's signatures sign.
  const std::string& manifest_bytes() const { return metadata().at(kManifestMetadataKey); }

  // Checks that every file of the package has the sha256 its manifest records, that the
  // package holds no file the manifest does not list (beyond the metadata that carries the
  // manifest and the zip writer's bookkeeping) and lacks none it lists. Throws IntegrityError.
  void verify_files() const;

  // Checks the files as verify_files does (the digests of only the files it writes: the other
  // models' are never read) and writes the files of `models` (names the manifest lists) into a
  // new private directory under `parent_dir` ($TMPDIR or /tmp when empty), one subdirectory
  // each. A file is hashed as it is written; the directory is removed again, before anything
  // loads from it, when a digest does not match or anything else fails.
  Extraction extract(const std::string& parent_dir, const std::vector<std::string>& models) const;

  // Throws PackageError unless the manifest lists a model `name`, listing the ones it has.
  void require_model(const std::string& name) const;
  // Each model's AOTI_DEVICE_KEY (the device AOTInductor compiled it for) equals the manifest's
  // device, else ManifestError naming both. Called after the host check (so a CUDA package on a
  // host without CUDA says that first): by verify_package, the lite runtime, and the full
  // runtime's own check at load.
  void check_device_keys() const;

 private:
  // Checks every file's digest; with a destination, writes its models' files into it.
  void check_files(Extraction* destination) const;
  [[noreturn]] void require_model_in_archive(const std::string& model) const;
  // The content of the signature entry (kSignatureEntry), nullopt when there is none.
  std::optional<std::string> signatures() const;
  std::string relative_name(const ZipEntry& entry) const;
  [[noreturn]] void fail(const std::string& problem) const;

  std::string path_;
  std::unique_ptr<PackageFile> file_;
  std::unique_ptr<ZipArchive> archive_;  // reads file_: declared after it, destroyed before
  std::string prefix_;     // the archive's top folder with its '/' ("package/")
  std::set<std::string> archive_models_;  // every "data/aotinductor/<name>/" in the archive
  std::map<std::string, Metadata> metadata_;  // by model name, for every listed model
  Manifest manifest_;
};

// A model's AOTInductor metadata JSON (archive entry `entry`): an object of strings; throws
// PackageError naming `path` and the entry otherwise.
Metadata parse_metadata(const std::string& text, const std::string& entry, const std::string& path);

// Parses the manifest stored under kManifestMetadataKey; throws ManifestError naming the path.
Manifest manifest_from_metadata(const Metadata& metadata, const std::string& path);

}  // namespace tdaot::detail
