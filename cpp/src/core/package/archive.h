// Internal: a package file read through one descriptor, and the zip archive in it, read with
// minizip (zlib's, Debian's libminizip1: it needs only zlib; libzip brought libcrypto into the
// lite runtime). Every entry is checked when the archive is opened (name, file type, encryption,
// compression, declared size), so nothing is read out of an archive that could climb out of a
// directory, plant a symlink or expand into more bytes than the caller allows.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/package/digest.h"

namespace tdaot::detail {

// A package file, read once in full when opened (its sha256, for pinning), then read again only
// where needed: the zip structure, the metadata and the entries a caller extracts. The process
// never holds the whole file (neither in a buffer nor mapped), so a load's peak memory does not
// grow with the package. Every later read of bytes that no manifest digest covers (the zip
// structure, the metadata that carries the manifest, signatures) is checked block by block
// against the first read, so what is parsed is exactly the file whose sha256 was reported and
// pinned: a file changed in place while it is loaded is refused (IntegrityError), not partly
// used; a rename over the path does not matter, the descriptor stays on the file that was opened.
//
// The check costs no second hash of the file: the first read keeps the sha256 state at the start
// of each block and the digest of the file up to the end of each block; a block read again is
// fed to a copy of the state at its start and must give that digest (for another block of the
// same length, that would be a SHA-256 collision).
class PackageFile {
 public:
  // Throws PackageError naming `path` when it does not exist, is a directory or another
  // non-regular file, cannot be read, or holds more than `max_bytes` bytes.
  PackageFile(const std::string& path, uint64_t max_bytes);
  ~PackageFile();
  PackageFile(const PackageFile&) = delete;
  PackageFile& operator=(const PackageFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  // The sha256 of the whole file, 64 lowercase hex digits.
  const std::string& sha256() const { return sha256_; }
  // The size of the blocks checked: 16 KiB, larger for files over 64 MiB (at most 4096 blocks).
  uint64_t block_size() const { return block_; }
  // Its first bytes (at most 4), for the zip signature.
  std::string_view head() const { return head_; }

  // `size` bytes at `offset` into `out`; returns how many (fewer only at the end of the file).
  // With `checked`, the bytes are those of the first read; otherwise a caller checks them (an
  // entry's manifest digest). On a mismatch or a short read, marks the file as changed and
  // returns -1; on a read error, returns -1 with errno set.
  int64_t read(uint64_t offset, void* out, uint64_t size, bool checked);
  // Throws IntegrityError when a read found the file changed since it was opened.
  void require_unchanged() const;

  // A minizip handle (unzFile) on this file, which must outlive it, or nullptr when minizip finds
  // no zip archive: every read checked, except while a ReadsCoveredByDigest is alive.
  void* open_archive();
  // minizip's result `code` in words, with the errno of the last failed read.
  std::string error_text(int code) const;

  // While alive, reads through the zip source are not checked against the first read: the
  // caller checks what it reads against a manifest digest that a checked read produced.
  class ReadsCoveredByDigest {
   public:
    explicit ReadsCoveredByDigest(PackageFile& file) : file_(file) { file_.covered_ = true; }
    ~ReadsCoveredByDigest() { file_.covered_ = false; }
    ReadsCoveredByDigest(const ReadsCoveredByDigest&) = delete;
    ReadsCoveredByDigest& operator=(const ReadsCoveredByDigest&) = delete;

   private:
    PackageFile& file_;
  };

 private:
  friend struct ZipSourceCallback;
  bool load_block(uint64_t index);

  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string sha256_;
  std::string head_;
  uint64_t block_ = 0;
  std::vector<Sha256> starts_;     // the sha256 state at the start of each block (first read)
  std::vector<Sha256Raw> ends_;    // the digest of the file up to the end of each block
  std::string cache_;              // the last checked block, served again without a read
  uint64_t cached_ = UINT64_MAX;   // its index
  bool covered_ = false;
  bool changed_ = false;
  uint64_t changed_at_ = 0;
  uint64_t position_ = 0;          // minizip's offset
  int error_ = 0;                  // the errno of minizip's last failed read
};

struct ZipEntry {
  std::string name;    // as stored, including the archive's top folder
  uint64_t size = 0;   // declared uncompressed size
  uint64_t directory_offset = 0;  // minizip's position of its central directory record
  uint64_t number = 0;            // its index
  bool directory = false;
};

class ZipArchive {
 public:
  // Opens the archive in `file`, which must outlive this object. Throws PackageError naming its
  // path when the bytes are not a consistent zip archive, or when an entry is unsafe: an
  // absolute name or one with a '..' component or a backslash, a symbolic link or other
  // non-regular file, an encrypted entry, an unknown compression method, two entries of one
  // name, or declared sizes above `max_unpacked_bytes` (alone or together); IntegrityError when
  // the file changed since it was opened.
  ZipArchive(PackageFile& file, uint64_t max_unpacked_bytes);
  ~ZipArchive();
  ZipArchive(const ZipArchive&) = delete;
  ZipArchive& operator=(const ZipArchive&) = delete;

  const std::vector<ZipEntry>& entries() const { return entries_; }

  // The content of `entry`. Throws PackageError when it cannot be decompressed, fails its CRC,
  // or holds another number of bytes than it declares.
  // The bytes are checked against the file's first read (small entries: metadata, signatures).
  std::string read(const ZipEntry& entry) const;

  // The content of `entry`, handed to `sink` in pieces of at most 64 KiB as it is decompressed;
  // the checks of read() (size, CRC) come after the last piece, so nothing may use the pieces
  // before this returns. Not checked against the first read: the caller checks the whole
  // against the entry's manifest digest.
  void stream(const ZipEntry& entry, const std::function<void(std::string_view)>& sink) const;

 private:
  void read_into(const ZipEntry& entry, const std::function<void(std::string_view)>& sink) const;
  // Makes `entry` minizip's current entry and opens it; minizip's result code.
  int open_entry(const ZipEntry& entry) const;
  [[noreturn]] void fail(const std::string& problem) const;

  struct Close {
    void operator()(void* zip) const;
  };
  PackageFile& file_;
  std::string path_;
  std::unique_ptr<void, Close> zip_;  // minizip's unzFile (its current entry changes on reads)
  std::vector<ZipEntry> entries_;
};

}  // namespace tdaot::detail
