// Internal: a zip archive held in memory, read with libzip. Every entry is checked when the
// archive is opened (name, file type, encryption, compression, declared size), so nothing is
// read out of an archive that could climb out of a directory, plant a symlink or expand
// into more bytes than the caller allows.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

struct zip;

namespace tdaot::detail {

struct ZipEntry {
  std::string name;    // as stored, including the archive's top folder
  uint64_t size = 0;   // declared uncompressed size
  uint64_t index = 0;  // libzip's index
  bool directory = false;
};

class ZipArchive {
 public:
  // Opens the archive in `bytes`, which must outlive this object. Throws PackageError naming
  // `path` (used only in messages) when the bytes are not a consistent zip archive, or when an
  // entry is unsafe: an absolute name or one with a '..' component or a backslash, a symbolic
  // link or other non-regular file, an encrypted entry, an unknown compression method, two
  // entries of one name, or declared sizes above `max_unpacked_bytes` (alone or together).
  ZipArchive(std::string_view bytes, std::string path, uint64_t max_unpacked_bytes);
  ~ZipArchive();
  ZipArchive(const ZipArchive&) = delete;
  ZipArchive& operator=(const ZipArchive&) = delete;

  const std::vector<ZipEntry>& entries() const { return entries_; }

  // The content of `entry`. Throws PackageError when it cannot be decompressed, fails its CRC,
  // or holds another number of bytes than it declares.
  std::string read(const ZipEntry& entry) const;

 private:
  [[noreturn]] void fail(const std::string& problem) const;

  struct Discard {
    void operator()(struct zip* zip) const;
  };
  std::string path_;
  std::unique_ptr<struct zip, Discard> zip_;
  std::vector<ZipEntry> entries_;
};

}  // namespace tdaot::detail
