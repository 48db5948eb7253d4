// Reading a package's metadata and manifest: file and entry-name checks first, so missing,
// garbage or hostile files get a clear PackageError, then AOTInductor's own metadata reader.
#include "package.h"

#include <c10/util/Exception.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tdaot/errors.h"

namespace tdaot {
namespace detail {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw PackageError(path, "package '" + path + "' " + problem);
}

// A .pt2 package is a zip archive; its first bytes are a local file header.
void check_file(const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (status.type() == fs::file_type::not_found) fail(path, "does not exist");
  if (ec) fail(path, "cannot be accessed: " + ec.message());
  if (fs::is_directory(status)) fail(path, "is a directory, not a .pt2 file");

  std::ifstream file(path, std::ios::binary);
  if (!file) fail(path, std::string("cannot be read: ") + std::strerror(errno));
  std::array<char, 4> magic{};
  file.read(magic.data(), magic.size());
  if (file.gcount() != static_cast<std::streamsize>(magic.size()) ||
      std::memcmp(magic.data(), "PK\x03\x04", magic.size()) != 0) {
    fail(path, "is not a .pt2 package (not a zip archive)");
  }
}

bool escapes_directory(const std::string& entry) {
  if (!entry.empty() && (entry.front() == '/' || entry.front() == '\\')) return true;
  size_t start = 0;
  for (;;) {
    const size_t end = entry.find_first_of("/\\", start);
    if (entry.compare(start, end - start, "..") == 0) return true;
    if (end == std::string::npos) return false;
    start = end + 1;
  }
}

// torch 2.13's loader extracts entries by their stored names: an entry under the model dir
// named ".../model/../../../../../tmp/x" is written outside its temp dir (reproduced). Archives
// with such names never reach it.
void check_entry_names(const std::string& path) {
  std::vector<std::string> entries;
  try {
    entries = caffe2::serialize::PyTorchStreamReader(path).getAllRecords();
  } catch (const std::exception& e) {
    fail(path, "is not a .pt2 package: " + exception_text(e));
  }
  for (const std::string& entry : entries) {
    if (escapes_directory(entry)) {
      fail(path, "has an unsafe entry '" + entry +
                     "' (an absolute path or a '..' component); refusing to extract it");
    }
  }
}

}  // namespace

std::mutex& aoti_metadata_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::string exception_text(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string text = c10_error ? c10_error->what_without_backtrace() : e.what();
  // AOTI messages often end in newlines, which would split one-line error reports.
  text.erase(text.find_last_not_of(" \n\r\t") + 1);
  return text;
}

Metadata read_package_metadata(const std::string& path, const std::string& model_name) {
  check_file(path);
  check_entry_names(path);
  try {
    // Reads only the wrapper's *_metadata.json entry; the compiled library is not loaded.
    std::lock_guard<std::mutex> lock(aoti_metadata_mutex());
    return torch::inductor::AOTIModelPackageLoader::load_metadata_from_package(path, model_name);
  } catch (const std::exception& e) {
    fail(path, "is not a .pt2 package with an AOTInductor model '" + model_name +
                   "': " + exception_text(e));
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

}  // namespace detail

// Declared in tdaot/manifest.h; defined here because it reads the package file.
Manifest read_manifest(const std::string& package_path) {
  return detail::manifest_from_metadata(
      detail::read_package_metadata(package_path, detail::kDefaultModelName), package_path);
}

}  // namespace tdaot
