// libFuzzer target: the zip/package reader (cpp/src/core/package: PackageFile, ZipArchive,
// Package, verify_package), the first code a .pt2 file's bytes meet in both runtimes. An input
// is a package file's bytes, written to a file of this process's own temp dir (the reader takes
// a path, as the runtimes give it), then opened as a Package (manifest, metadata, device key,
// signatures) and checked as verify_package does (every file's digest), never extracted.
// Anything but a tdaot::Error is a finding.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/package/package.h"
#include "fuzz_support.h"
#include "tdaot/package.h"

namespace {

// The file each input is written to, in a folder of this process's own, removed at exit. Held
// by a pointer that is never freed: the exit handler runs after static destructors would have.
const std::string& scratch_file() {
  static const std::string* const path = [] {
    const char* tmp = std::getenv("TMPDIR");
    const std::filesystem::path dir = std::filesystem::path(tmp != nullptr ? tmp : "/tmp") /
                                      ("tdaot_fuzz_package." + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    auto* file = new std::string((dir / "fuzz.pt2").string());
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(std::filesystem::path(*path).parent_path(), ec);
    });
    return file;
  }();
  return *path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = scratch_file();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  tdaot::fuzz::only_tdaot_errors("fuzz_package", [&] {
    tdaot::PackageOptions options;
    options.max_package_bytes = 1 << 20;
    const tdaot::detail::Package package(path, options);
    tdaot::fuzz::note("opened: " + std::to_string(package.manifest().models.size()) + " model(s)");
  });
  tdaot::fuzz::only_tdaot_errors("fuzz_package", [&] {
    tdaot::fuzz::note("verified: " + tdaot::verify_package(path, "", {}));
  });
  return 0;
}
