// Reading, verifying and extracting a package (see package.h for why tdaot does it itself).
#include "package.h"

#include <c10/util/Exception.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "archive.h"
#include "digest.h"
#include "tdaot/errors.h"
#include "tdaot/policy.h"

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

// The whole file, after the checks that give the clearest message for a wrong path.
std::string read_file(const std::string& path, uint64_t max_bytes) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (status.type() == fs::file_type::not_found) fail_path(path, "does not exist");
  if (ec) fail_path(path, "cannot be accessed: " + ec.message());
  if (fs::is_directory(status)) fail_path(path, "is a directory, not a .pt2 file");
  // A device or a named pipe could block the read or never end.
  if (!fs::is_regular_file(status)) fail_path(path, "is not a regular file, not a .pt2 file");
  std::ifstream file(path, std::ios::binary);
  if (!file) fail_path(path, std::string("cannot be read: ") + std::strerror(errno));
  // Read in blocks up to one past the limit: the size is checked on what was read.
  std::string bytes;
  char buffer[1 << 16];
  while (file.read(buffer, sizeof buffer) || file.gcount() > 0) {
    bytes.append(buffer, static_cast<size_t>(file.gcount()));
    if (bytes.size() > max_bytes) {
      fail_path(path, "is larger than the limit of " + std::to_string(max_bytes) +
                          " bytes (PolicyOptions::max_package_bytes)");
    }
  }
  if (file.bad()) fail_path(path, std::string("cannot be read: ") + std::strerror(errno));
  return bytes;
}

std::string checked_expected_sha256(const std::string& expected) {
  if (!is_sha256_hex(expected)) {
    throw Error("expected_sha256 must be a sha256 digest (64 hex digits), got '" +
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

// Creates `target` (which must not exist; symlinks are not followed) holding `data`.
void write_new_file(const std::string& target, const std::string& data, const std::string& path) {
  const int fd = ::open(target.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    fail_path(path, "cannot be extracted to '" + target + "': " + std::strerror(errno));
  }
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t wrote = ::write(fd, data.data() + done, data.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) {
      const int error = errno;
      ::close(fd);
      fail_path(path, "cannot be extracted to '" + target + "': " + std::strerror(error));
    }
    done += static_cast<size_t>(wrote);
  }
  if (::close(fd) != 0) {
    fail_path(path, "cannot be extracted to '" + target + "': " + std::strerror(errno));
  }
}

Metadata parse_metadata(const std::string& text, const std::string& entry,
                        const std::string& path) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail_path(path, "has invalid AOTInductor metadata in '" + entry + "': " + e.what());
  }
  if (!root.is_object()) {
    fail_path(path, "has invalid AOTInductor metadata in '" + entry + "': expected a JSON object");
  }
  Metadata metadata;
  for (const auto& [key, value] : root.items()) {
    if (!value.is_string()) {
      fail_path(path, "has invalid AOTInductor metadata in '" + entry + "': the value of '" +
                          key + "' is not a string");
    }
    metadata.emplace(key, value.get<std::string>());
  }
  return metadata;
}

}  // namespace

ExtractedModel::~ExtractedModel() {
  if (directory_.empty()) return;
  std::error_code ignored;  // a destructor cannot report; nothing else uses the directory
  fs::remove_all(directory_, ignored);
}

ExtractedModel::ExtractedModel(ExtractedModel&& other) noexcept
    : library(std::move(other.library)),
      weights_blob(std::move(other.weights_blob)),
      directory_(std::exchange(other.directory_, {})) {}

Package::Package(std::string path, const PolicyOptions& options)
    : path_(std::move(path)), bytes_(read_file(path_, options.max_package_bytes)) {
  sha256_ = sha256_hex(bytes_);
  if (!options.expected_sha256.empty()) {
    const std::string expected = checked_expected_sha256(options.expected_sha256);
    if (expected != sha256_) {
      throw IntegrityError(path_, "package '" + path_ + "' has sha256 " + sha256_ +
                                      ", but the pinned expected_sha256 is " + expected +
                                      "; refusing to load another artifact than the pinned one");
    }
  }
  // A .pt2 package is a zip archive; its first bytes are a local file header.
  if (bytes_.size() < 4 || bytes_.compare(0, 4, "PK\x03\x04", 4) != 0) {
    fail(bytes_.empty() ? "is empty, not a .pt2 package"
                        : "is not a .pt2 package (not a zip archive)");
  }
  archive_ = std::make_unique<ZipArchive>(bytes_, path_, options.max_package_bytes);

  // AOTInductor keeps every entry under one top folder, named after the file it wrote.
  const std::string& first = archive_->entries().front().name;
  const size_t slash = first.find('/');
  if (slash == std::string::npos || slash == 0) {
    fail("has an entry '" + first + "' outside a top folder; not an AOTInductor package");
  }
  prefix_ = first.substr(0, slash + 1);
  for (const ZipEntry& entry : archive_->entries()) {
    if (!starts_with(entry.name, prefix_)) {
      fail("has entries under both '" + prefix_ + "' and '" + entry.name +
           "'; an AOTInductor package keeps everything under one top folder");
    }
  }

  model_dir_ = "data/aotinductor/" + options.model_name + "/";
  const ZipEntry* wrapper_metadata = nullptr;
  std::set<std::string> models;
  for (const ZipEntry& entry : archive_->entries()) {
    const std::string relative = relative_name(entry);
    if (starts_with(relative, "data/aotinductor/")) {
      const std::string rest = relative.substr(std::strlen("data/aotinductor/"));
      if (rest.find('/') != std::string::npos) models.insert(rest.substr(0, rest.find('/')));
    }
    if (!starts_with(relative, model_dir_) || !ends_with(relative, "wrapper_metadata.json")) {
      continue;
    }
    if (wrapper_metadata != nullptr) {
      fail("has two metadata files for model '" + options.model_name + "' ('" +
           wrapper_metadata->name + "' and '" + entry.name + "')");
    }
    wrapper_metadata = &entry;
  }
  if (wrapper_metadata == nullptr) {
    std::string found;
    for (const auto& model : models) found += (found.empty() ? "" : ", ") + model;
    fail("is not a .pt2 package with an AOTInductor model '" + options.model_name +
         "' (models in it: " + (found.empty() ? "none" : found) + ")");
  }
  if (wrapper_metadata->size > kMaxMetadataBytes) {
    fail("has a metadata file '" + wrapper_metadata->name + "' of " +
         std::to_string(wrapper_metadata->size) + " bytes; AOTInductor metadata is far smaller");
  }
  metadata_ = parse_metadata(archive_->read(*wrapper_metadata), wrapper_metadata->name, path_);
  manifest_ = manifest_from_metadata(metadata_, path_);
}

Package::~Package() = default;

void Package::fail(const std::string& problem) const { fail_path(path_, problem); }

std::string Package::relative_name(const ZipEntry& entry) const {
  return entry.name.substr(prefix_.size());
}

void Package::verify_files() const { check_files(nullptr); }

ExtractedModel Package::extract(const std::string& parent_dir) const {
  ExtractedModel model(make_private_directory(parent_dir, path_));
  check_files(&model);  // on a throw, `model` removes the directory
  if (model.library.empty()) {
    fail("has no compiled library (.so) for model '" + model_dir_ +
         "'; packages that compile at load time are not supported");
  }
  return model;
}

void Package::check_files(ExtractedModel* destination) const {
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
    const std::string data = archive_->read(entry);
    const std::string digest = sha256_hex(data);
    if (digest != listed->second) {
      throw IntegrityError(path_, "package '" + path_ + "': file '" + relative + "' has sha256 " +
                                      digest + ", but the manifest records " + listed->second +
                                      " (the package was modified after it was built)");
    }
    seen.insert(relative);
    // Like AOTInductor's loader: the model's own folder, and the shared constants folder.
    const bool in_model = starts_with(relative, model_dir_);
    if (destination == nullptr || !(in_model || starts_with(relative, "data/constants/"))) {
      continue;
    }
    const std::string name = relative.substr(relative.rfind('/') + 1);
    const std::string target = destination->directory() + "/" + name;
    write_new_file(target, data, path_);
    if (in_model && ends_with(name, ".so")) {
      if (!destination->library.empty()) {
        fail("has two compiled libraries for model '" + model_dir_ + "'");
      }
      destination->library = target;
    } else if (ends_with(name, ".blob")) {
      destination->weights_blob = target;
    }
  }
  for (const auto& [name, digest] : manifest_.files) {
    if (seen.count(name) == 0) {
      throw IntegrityError(path_, "package '" + path_ + "' lacks the file '" + name +
                                      "' that its manifest lists (sha256 " + digest + ")");
    }
  }
}

Manifest manifest_from_metadata(const Metadata& metadata, const std::string& path) {
  auto it = metadata.find(kManifestMetadataKey);
  if (it == metadata.end()) {
    throw ManifestError(path, "package '" + path + "' has no '" + kManifestMetadataKey +
                                  "' metadata: it was not built by tdaot.build");
  }
  return Manifest::from_json(it->second, path);
}

std::string exception_text(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string text = c10_error ? c10_error->what_without_backtrace() : e.what();
  // AOTI messages often end in newlines, which would split one-line error reports.
  text.erase(text.find_last_not_of(" \n\r\t") + 1);
  return text;
}

}  // namespace detail

// Declared in tdaot/manifest.h; defined here because it reads the package file.
Manifest read_manifest(const std::string& package_path) {
  return detail::Package(package_path, PolicyOptions{}).manifest();
}

std::string verify_package(const std::string& package_path, const std::string& expected_sha256) {
  PolicyOptions options;
  options.expected_sha256 = expected_sha256;
  const detail::Package package(package_path, options);
  package.verify_files();
  return package.sha256();
}

}  // namespace tdaot
