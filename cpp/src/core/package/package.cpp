// Reading, verifying and extracting a package (see package.h for why tdaot does it itself).
#include "core/package/package.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <map>
#include <set>
#include <string_view>
#include <utility>

#include "core/manifest/manifest_internal.h"
#include "core/package/archive.h"
#include "core/package/digest.h"
#include "core/package/signature.h"
#include "tdaot/errors.h"
#include "tdaot/package.h"

namespace tdaot {
namespace detail {
namespace {

namespace fs = std::filesystem;

// Metadata JSON larger than this is not AOTInductor's (it holds a few strings).
constexpr uint64_t kMaxMetadataBytes = 16u << 20;

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

[[noreturn]] void fail_path(const std::string& path, const std::string& problem) {
  throw PackageError(path, "package '" + path + "' " + problem);
}

std::string checked_expected_sha256(const std::string& expected) {
  if (!is_sha256_hex(expected)) {
    throw InvalidArgumentError("expected_sha256 must be a sha256 digest (64 hex digits), got '" +
                expected + "'");
  }
  return lowercase(expected);
}

// A new private directory (mkdtemp: mode 0700) under `parent`.
std::string make_private_directory(const std::string& parent, const std::string& path) {
  std::string base = parent;
  if (base.empty()) {
    const char* tmpdir = std::getenv("TMPDIR");
    base = (tmpdir != nullptr && *tmpdir != '\0') ? tmpdir : "/tmp";
  }
  std::string pattern = base + "/tdaot-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    fail_path(path, "cannot be extracted: no temporary directory could be created under '" +
                        base + "': " + std::strerror(errno));
  }
  return pattern;
}

// A new file `target` (which must not exist; symlinks are not followed), written in pieces.
class NewFile {
 public:
  NewFile(std::string target, const std::string& path) : target_(std::move(target)), path_(path) {
    fd_ = ::open(target_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd_ < 0) fail(errno);
  }
  ~NewFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  NewFile(const NewFile&) = delete;
  NewFile& operator=(const NewFile&) = delete;

  void write(std::string_view data) {
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t wrote = ::write(fd_, data.data() + done, data.size() - done);
      if (wrote < 0 && errno == EINTR) continue;
      if (wrote <= 0) fail(errno);
      done += static_cast<size_t>(wrote);
    }
  }
  void close() {
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) fail(errno);
  }

 private:
  [[noreturn]] void fail(int error) const {
    fail_path(path_, "cannot be extracted to '" + target_ + "': " + std::strerror(error));
  }
  std::string target_;
  const std::string& path_;
  int fd_ = -1;
};

}  // namespace

Extraction::~Extraction() {
  if (directory_.empty()) return;
  std::error_code ignored;  // a destructor cannot report; nothing else uses the directory
  fs::remove_all(directory_, ignored);
}

Extraction::Extraction(Extraction&& other) noexcept
    : models(std::move(other.models)), directory_(std::exchange(other.directory_, {})) {}

const ExtractedModel& Extraction::model(const std::string& name) const {
  for (const auto& model : models) {
    if (model.name == name) return model;
  }
  throw InternalError("model '" + name + "' was not extracted");
}

Package::Package(std::string path, const PackageOptions& options)
    : path_(std::move(path)),
      file_(std::make_unique<PackageFile>(path_, options.max_package_bytes)) {
  if (!options.expected_sha256.empty()) {
    const std::string expected = checked_expected_sha256(options.expected_sha256);
    if (expected != sha256()) {
      throw IntegrityError(path_, "package '" + path_ + "' has sha256 " + sha256() +
                                      ", but the pinned expected_sha256 is " + expected +
                                      "; refusing to load another artifact than the pinned one");
    }
  }
  // A .pt2 package is a zip archive; its first bytes are a local file header.
  if (file_->head() != std::string_view("PK\x03\x04", 4)) {
    fail(file_->size() == 0 ? "is empty, not a .pt2 package"
                            : "is not a .pt2 package (not a zip archive)");
  }
  archive_ = std::make_unique<ZipArchive>(*file_, options.max_package_bytes);

  // AOTInductor keeps every entry under one top folder, named after the file it wrote.
  const std::string& first_entry = archive_->entries().front().name;
  const size_t slash = first_entry.find('/');
  if (slash == std::string::npos || slash == 0) {
    fail("has an entry '" + first_entry + "' outside a top folder; not an AOTInductor package");
  }
  prefix_ = first_entry.substr(0, slash + 1);
  for (const ZipEntry& entry : archive_->entries()) {
    if (!starts_with(entry.name, prefix_)) {
      fail("has entries under both '" + prefix_ + "' and '" + entry.name +
           "'; an AOTInductor package keeps everything under one top folder");
    }
  }

  // Each model's folder, and its wrapper's metadata (which carries the manifest).
  std::map<std::string, const ZipEntry*> wrapper_metadata;
  constexpr std::string_view kModels = "data/aotinductor/";
  for (const ZipEntry& entry : archive_->entries()) {
    const std::string relative = relative_name(entry);
    if (!starts_with(relative, kModels)) continue;
    const size_t slash = relative.find('/', kModels.size());
    if (slash == std::string::npos) continue;
    const std::string model = relative.substr(kModels.size(), slash - kModels.size());
    archive_models_.insert(model);
    if (!ends_with(relative, "wrapper_metadata.json")) continue;
    const ZipEntry*& seen = wrapper_metadata[model];
    if (seen != nullptr) {
      fail("has two metadata files for model '" + model + "' ('" + seen->name + "' and '" +
           entry.name + "')");
    }
    seen = &entry;
  }
  const auto read_metadata = [&](const std::string& model) {
    const auto found = wrapper_metadata.find(model);
    if (found == wrapper_metadata.end()) require_model_in_archive(model);
    const ZipEntry& entry = *found->second;
    if (entry.size > kMaxMetadataBytes) {
      fail("has a metadata file '" + entry.name + "' of " + std::to_string(entry.size) +
           " bytes; AOTInductor metadata is far smaller");
    }
    return parse_metadata(archive_->read(entry), entry.name, path_);
  };
  // The manifest is read from model "model" (every tdaot build has it) or else the first model,
  // and must then list every model, each carrying the same manifest.
  const std::string first = wrapper_metadata.count(kDefaultModelName) != 0 || wrapper_metadata.empty()
                                ? std::string(kDefaultModelName)
                                : wrapper_metadata.begin()->first;
  Metadata first_metadata = read_metadata(first);
  manifest_ = manifest_from_metadata(first_metadata, path_);
  const std::string& manifest_json = first_metadata.at(kManifestMetadataKey);
  for (const ModelSpec& model : manifest_.models) {
    Metadata metadata = model.name == first ? first_metadata : read_metadata(model.name);
    const auto carried = metadata.find(kManifestMetadataKey);
    if (carried == metadata.end() || carried->second != manifest_json) {
      throw ManifestError(path_, "package '" + path_ + "': model '" + model.name +
                                     "' carries another manifest than model '" + first +
                                     "' (or none); every model of a package carries the same");
    }
    metadata_.emplace(model.name, std::move(metadata));
  }
  for (const std::string& model : archive_models_) {
    if (metadata_.count(model) == 0) {
      throw ManifestError(path_, "package '" + path_ + "' holds an AOTInductor model '" + model +
                                     "' that its manifest does not list (models: " +
                                     manifest_.describe_models() + ")");
    }
  }
  // The manifest holds every file's digest, so its signature vouches for the whole package.
  if (!options.trusted_keys.empty()) {
    verify_signatures(manifest_bytes(), signatures(), options.trusted_keys,
                      {path_, "package '" + path_ + "'", "manifest"});
  }
}

std::optional<std::string> Package::signatures() const {
  const std::string name = prefix_ + std::string(kSignatureEntry);
  for (const ZipEntry& entry : archive_->entries()) {
    if (entry.name != name) continue;
    if (entry.size > kMaxMetadataBytes) {
      fail("has a signature entry '" + name + "' of " + std::to_string(entry.size) +
           " bytes; signatures are far smaller");
    }
    return archive_->read(entry);
  }
  return std::nullopt;
}

void Package::check_device_keys() const {
  for (const ModelSpec& model : manifest_.models) {
    const Metadata& metadata = metadata_.at(model.name);
    const auto device_key = metadata.find("AOTI_DEVICE_KEY");
    if (device_key == metadata.end() || device_key->second != manifest_.device) {
      const std::string which = manifest_.models.size() > 1 ? " of model '" + model.name + "'" : "";
      throw ManifestError(path_, "package '" + path_ + "': AOTInductor's metadata" + which +
                                     " names device '" +
                                     (device_key == metadata.end() ? std::string("<none>")
                                                                   : device_key->second) +
                                     "', but the manifest says '" + manifest_.device + "'");
    }
  }
}

void Package::require_model_in_archive(const std::string& model) const {
  if (archive_models_.count(model) != 0) {
    // The model's folder is there, its metadata file is not: say exactly that.
    fail("has model '" + model + "' (folder '" + prefix_ + "data/aotinductor/" + model +
         "/') but not its metadata file (*wrapper_metadata.json, which carries the manifest); "
         "the package is incomplete or was edited");
  }
  std::string found;
  for (const auto& name : archive_models_) found += (found.empty() ? "" : ", ") + name;
  fail("is not a .pt2 package with an AOTInductor model '" + model +
       "' (models in it: " + (found.empty() ? "none" : found) + ")");
}

void Package::require_model(const std::string& name) const {
  if (metadata_.count(name) != 0) return;
  fail("has no model '" + name + "' (models: " + manifest_.describe_models() + ")");
}

Package::~Package() = default;

const std::string& Package::sha256() const { return file_->sha256(); }

void Package::fail(const std::string& problem) const { fail_path(path_, problem); }

std::string Package::relative_name(const ZipEntry& entry) const {
  return entry.name.substr(prefix_.size());
}

void Package::verify_files() const { check_files(nullptr); }

Extraction Package::extract(const std::string& parent_dir,
                            const std::vector<std::string>& models) const {
  Extraction extraction(make_private_directory(parent_dir, path_));
  for (const std::string& name : models) {
    require_model(name);
    ExtractedModel model;
    model.name = name;
    model.directory = extraction.directory() + "/" + name;
    if (::mkdir(model.directory.c_str(), 0700) != 0) {
      fail("cannot be extracted: cannot create '" + model.directory + "': " + std::strerror(errno));
    }
    extraction.models.push_back(std::move(model));
  }
  check_files(&extraction);  // on a throw, `extraction` removes the directory
  for (const ExtractedModel& model : extraction.models) {
    if (model.library.empty()) {
      fail("has no compiled library (.so) for model '" + model.name +
           "'; packages that compile at load time are not supported");
    }
  }
  return extraction;
}

namespace {

// Whether the archive file `relative` is written by an extraction of `destination`'s models:
// their own folders and the shared constants folder (as AOTInductor's loader lays them out).
bool extracted_by(const Extraction& destination, const std::string& relative) {
  if (relative.rfind("data/constants/", 0) == 0) return true;
  for (const ExtractedModel& model : destination.models) {
    if (relative.rfind("data/aotinductor/" + model.name + "/", 0) == 0) return true;
  }
  return false;
}

}  // namespace

void Package::check_files(Extraction* destination) const {
  std::set<std::string> seen;
  for (const ZipEntry& entry : archive_->entries()) {
    if (entry.directory) continue;
    const std::string relative = relative_name(entry);
    // The metadata JSONs (parsed as data, the wrapper's, or ignored) and the zip writer's
    // records are never extracted, so they need no digest (tdaot/manifest.h).
    if (digest_exempt(relative)) continue;
    const auto listed = manifest_.files.find(relative);
    if (listed == manifest_.files.end()) {
      throw IntegrityError(path_, "package '" + path_ + "' holds a file '" + relative +
                                      "' that its manifest does not list (added after the "
                                      "build?); refusing to load it");
    }
    seen.insert(relative);
    // Extracting: a file of a model that is not extracted is never written nor loaded, so
    // reading and hashing it would only cost time (the lite runtime's start: the throughput
    // model is most of a package's bytes). verify_files (no destination) checks every file.
    if (destination != nullptr && !extracted_by(*destination, relative)) continue;
    // Like AOTInductor's loader: each model's own folder, and the shared constants folder.
    // Each piece is hashed and written as it comes out of the archive (the package is never
    // held whole); a digest that does not match refuses the package, and the extraction's
    // directory, with what was written, is removed before anything loads from it.
    const bool shared = starts_with(relative, "data/constants/");
    const std::string name = relative.substr(relative.rfind('/') + 1);
    std::vector<std::unique_ptr<NewFile>> targets;
    if (destination != nullptr) {
      for (ExtractedModel& model : destination->models) {
        const bool own = starts_with(relative, "data/aotinductor/" + model.name + "/");
        if (!own && !shared) continue;
        const std::string target = model.directory + "/" + name;
        targets.push_back(std::make_unique<NewFile>(target, path_));
        if (own && ends_with(name, ".so")) {
          if (!model.library.empty()) fail("has two compiled libraries for model '" + model.name + "'");
          model.library = target;
        } else if (ends_with(name, ".blob")) {
          model.weights_blob = target;
        }
      }
    }
    Sha256 hash;
    archive_->stream(entry, [&](std::string_view piece) {
      hash.update(piece);
      for (const auto& target : targets) target->write(piece);
    });
    for (const auto& target : targets) target->close();
    const std::string digest = hash.hex();
    if (digest != listed->second) {
      throw IntegrityError(path_, "package '" + path_ + "': file '" + relative + "' has sha256 " +
                                      digest + ", but the manifest records " + listed->second +
                                      " (the package was modified after it was built)");
    }
  }
  for (const auto& [name, digest] : manifest_.files) {
    if (seen.count(name) == 0) {
      throw IntegrityError(path_, "package '" + path_ + "' lacks the file '" + name +
                                      "' that its manifest lists (sha256 " + digest + ")");
    }
  }
}

}  // namespace detail

// Declared in tdaot/manifest.h; defined here because it reads the package file.
Manifest read_manifest(const std::string& package_path) {
  return detail::Package(package_path, PackageOptions{}).manifest();
}

std::string read_manifest_bytes(const std::string& package_path) {
  return detail::Package(package_path, PackageOptions{}).manifest_bytes();
}

std::string verify_package(const std::string& package_path, const std::string& expected_sha256,
                           const std::vector<std::string>& trusted_keys) {
  PackageOptions options;
  options.expected_sha256 = expected_sha256;
  options.trusted_keys = trusted_keys;
  const detail::Package package(package_path, options);
  package.check_device_keys();
  package.verify_files();
  return package.sha256();
}

FileKind file_kind(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw PackageError(path, "'" + path + "' cannot be opened");
  std::array<char, 9> head{};
  in.read(head.data(), head.size());
  const auto got = static_cast<size_t>(in.gcount());
  // A zip archive starts with a local file header; safetensors with the 8-byte length of its
  // JSON header, which opens with '{'.
  if (got >= 4 && std::string(head.data(), 4) == std::string("PK\x03\x04", 4)) {
    return FileKind::kPackage;
  }
  if (got == head.size() && head[8] == '{') return FileKind::kWeights;
  throw PackageError(path, "'" + path +
                               "' is neither a tdaot package (.pt2: a zip archive) nor a tdaot "
                               "weight file (.tdw: safetensors, made by tdaot.export_weights)");
}

}  // namespace tdaot
