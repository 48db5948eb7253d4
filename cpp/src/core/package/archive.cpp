#include "core/package/archive.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <unzip.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <unordered_set>

#include "tdaot/errors.h"

namespace tdaot::detail {
namespace {

// minizip's result codes in words; a read error's errno (PackageFile keeps it) is added by callers.
std::string unzip_error(int code) {
  switch (code) {
    case UNZ_ERRNO: return "a read error";
    case UNZ_BADZIPFILE: return "inconsistent zip structure";
    case UNZ_CRCERROR: return "CRC error";
    case UNZ_PARAMERROR: return "an unsupported entry";
    default: return "zip error " + std::to_string(code);
  }
}

// The file type bits of a Unix-made entry (0 when the archive does not record one).
unsigned unix_file_type(const unz_file_info64& info) {
  constexpr unsigned long kUnix = 3;  // "version made by", high byte: the zip spec's host system
  if ((info.version >> 8) != kUnix) return 0;
  return static_cast<unsigned>((info.external_fa >> 16) & S_IFMT);
}

const char* file_type_name(unsigned type) {
  switch (type) {
    case S_IFLNK: return "a symbolic link";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFIFO: return "a named pipe";
    case S_IFSOCK: return "a socket";
    default: return "not a regular file";
  }
}

// True when `name` is absolute, has a '..' component or contains a backslash (or a NUL, which
// would cut the path short): extracting it by name could write outside the destination directory.
bool unsafe_entry_name(std::string_view name) {
  if (name.empty() || name.front() == '/') return true;
  if (name.find_first_of(std::string_view("\\\0", 2)) != std::string_view::npos) return true;
  size_t start = 0;
  for (;;) {
    const size_t end = name.find('/', start);
    if (name.substr(start, end - start) == "..") return true;
    if (end == std::string_view::npos) return false;
    start = end + 1;
  }
}

[[noreturn]] void fail_path(const std::string& path, const std::string& problem) {
  throw PackageError(path, "package '" + path + "' " + problem);
}

// pread until `size` bytes or the end of the file; -1 on an error (errno set).
int64_t read_fully(int fd, uint64_t offset, char* out, uint64_t size) {
  uint64_t done = 0;
  while (done < size) {
    const ssize_t got = ::pread(fd, out + done, size - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return -1;
    if (got == 0) break;
    done += static_cast<uint64_t>(got);
  }
  return static_cast<int64_t>(done);
}

}  // namespace

// --- the package file ---------------------------------------------------------------------------

PackageFile::PackageFile(const std::string& path, uint64_t max_bytes)
    : path_(path) {
  namespace fs = std::filesystem;
  // The checks that give the clearest message for a wrong path, then the same on what was opened.
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (status.type() == fs::file_type::not_found) fail_path(path, "does not exist");
  if (ec) fail_path(path, "cannot be accessed: " + ec.message());
  if (fs::is_directory(status)) fail_path(path, "is a directory, not a .pt2 file");
  // A device or a named pipe could block the read or never end (O_NONBLOCK: nor the open).
  if (!fs::is_regular_file(status)) fail_path(path, "is not a regular file, not a .pt2 file");
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) fail_path(path, std::string("cannot be read: ") + std::strerror(errno));
  struct stat opened {};
  if (::fstat(fd_, &opened) != 0 || !S_ISREG(opened.st_mode)) {
    ::close(fd_);
    fail_path(path, "is not a regular file, not a .pt2 file");
  }
  // Blocks of 16 KiB, or more for a large file, so that there are at most 4096 of them.
  block_ = 16 << 10;
  while (static_cast<uint64_t>(opened.st_size) / block_ >= 4096) block_ *= 2;
  // One pass over the whole file: its sha256, with the state at each block's start and the
  // digest at its end. The size limit is checked on what was read, so a file that grows while
  // it is read is still bounded.
  Sha256 whole;
  std::string buffer(block_ * std::max<uint64_t>(1, (256 << 10) / block_), '\0');
  for (;;) {
    const int64_t got = read_fully(fd_, size_, buffer.data(), buffer.size());
    if (got < 0) {
      const int error = errno;
      ::close(fd_);
      fail_path(path, std::string("cannot be read: ") + std::strerror(error));
    }
    if (size_ + static_cast<uint64_t>(got) > max_bytes) {
      ::close(fd_);
      fail_path(path, "is larger than the limit of " + std::to_string(max_bytes) +
                          " bytes (PackageOptions::max_package_bytes)");
    }
    const std::string_view data(buffer.data(), static_cast<size_t>(got));
    if (size_ == 0) head_ = std::string(data.substr(0, 4));
    for (size_t at = 0; at < data.size(); at += block_) {
      if (!starts_.empty()) ends_.push_back(whole.fork().raw());
      starts_.push_back(whole.fork());
      whole.update(data.substr(at, block_));
    }
    size_ += static_cast<uint64_t>(got);
    if (static_cast<uint64_t>(got) < buffer.size()) break;
  }
  const Sha256Raw digest = whole.raw();
  if (!starts_.empty()) ends_.push_back(digest);
  sha256_ = to_hex(digest);
}

PackageFile::~PackageFile() {
  if (fd_ >= 0) ::close(fd_);
}

bool PackageFile::load_block(uint64_t index) {
  if (cached_ == index) return true;
  const uint64_t offset = index * block_;
  const uint64_t length = std::min<uint64_t>(block_, size_ - offset);
  cached_ = UINT64_MAX;
  cache_.resize(length);
  const int64_t got = read_fully(fd_, offset, cache_.data(), length);
  if (got < 0) return false;
  bool same = static_cast<uint64_t>(got) == length;
  if (same) {
    Sha256 check = starts_[index].fork();
    check.update(cache_);
    same = check.raw() == ends_[index];
  }
  if (!same) {
    changed_ = true;
    changed_at_ = offset;
    errno = EIO;
    return false;
  }
  cached_ = index;
  return true;
}

int64_t PackageFile::read(uint64_t offset, void* out, uint64_t size, bool checked) {
  if (offset >= size_) return 0;
  size = std::min(size, size_ - offset);
  char* to = static_cast<char*>(out);
  if (!checked) {
    const int64_t got = read_fully(fd_, offset, to, size);
    if (got >= 0 && static_cast<uint64_t>(got) != size) {
      changed_ = true;  // shorter than when it was opened
      changed_at_ = offset + static_cast<uint64_t>(got);
      errno = EIO;
      return -1;
    }
    return got;
  }
  for (uint64_t done = 0; done < size;) {
    const uint64_t at = offset + done;
    if (!load_block(at / block_)) return -1;
    const uint64_t within = at % block_;
    const uint64_t take = std::min<uint64_t>(size - done, cache_.size() - within);
    std::memcpy(to + done, cache_.data() + within, take);
    done += take;
  }
  return static_cast<int64_t>(size);
}

void PackageFile::require_unchanged() const {
  if (!changed_) return;
  throw IntegrityError(path_, "package '" + path_ + "' changed while it was being read (its "
                                  "bytes at offset " + std::to_string(changed_at_) +
                                  " differ from those read first, whose sha256 is " + sha256_ +
                                  "); refusing to load it");
}

// minizip's view of a PackageFile: a seekable stream whose reads go through PackageFile::read.
// The stream is the PackageFile itself; minizip opens it once per archive.
struct ZipSourceCallback {
  static PackageFile& of(voidpf opaque) { return *static_cast<PackageFile*>(opaque); }
  static voidpf open(voidpf opaque, const void*, int) {
    of(opaque).position_ = 0;
    return opaque;
  }
  static uLong read(voidpf opaque, voidpf, void* out, uLong size) {
    PackageFile& file = of(opaque);
    const int64_t got = file.read(file.position_, out, size, !file.covered_);
    if (got < 0) {
      file.error_ = errno != 0 ? errno : EIO;
      return 0;
    }
    file.position_ += static_cast<uint64_t>(got);
    return static_cast<uLong>(got);
  }
  static uLong write(voidpf, voidpf, const void*, uLong) { return 0; }
  static ZPOS64_T tell(voidpf opaque, voidpf) { return of(opaque).position_; }
  static long seek(voidpf opaque, voidpf, ZPOS64_T offset, int origin) {
    PackageFile& file = of(opaque);
    const uint64_t base = origin == ZLIB_FILEFUNC_SEEK_SET   ? 0
                          : origin == ZLIB_FILEFUNC_SEEK_CUR ? file.position_
                                                             : file.size_;
    if (offset > file.size_ || base > file.size_ - offset) return -1;  // past the end: refused
    file.position_ = base + offset;
    return 0;
  }
  static int close(voidpf, voidpf) { return 0; }  // the PackageFile owns its descriptor
  static int error(voidpf opaque, voidpf) { return of(opaque).error_; }
};

void* PackageFile::open_archive() {
  zlib_filefunc64_def functions{};
  functions.zopen64_file = &ZipSourceCallback::open;
  functions.zread_file = &ZipSourceCallback::read;
  functions.zwrite_file = &ZipSourceCallback::write;
  functions.ztell64_file = &ZipSourceCallback::tell;
  functions.zseek64_file = &ZipSourceCallback::seek;
  functions.zclose_file = &ZipSourceCallback::close;
  functions.zerror_file = &ZipSourceCallback::error;
  functions.opaque = this;
  error_ = 0;
  return unzOpen2_64(path_.c_str(), &functions);
}

std::string PackageFile::error_text(int code) const {
  if (code == UNZ_ERRNO && error_ != 0) return unzip_error(code) + ": " + std::strerror(error_);
  return unzip_error(code);
}

// --- the archive ----------------------------------------------------------------------------------

ZipArchive::ZipArchive(PackageFile& file, uint64_t max_unpacked_bytes)
    : file_(file), path_(file.path()) {
  // minizip finds the end of the central directory and reads the directory; a truncated copy
  // has none (or one that points past the end: seeks there are refused).
  zip_.reset(file_.open_archive());
  if (!zip_) {
    fail("is not a .pt2 package (a damaged or truncated zip archive: no readable central "
         "directory)");
  }
  unz_global_info64 global{};
  if (unzGetGlobalInfo64(zip_.get(), &global) != UNZ_OK || global.number_entry == 0) {
    fail("is an empty zip archive, not a .pt2 package");
  }
  const std::string over_limit = ", more than the limit of " +
                                 std::to_string(max_unpacked_bytes) + " (max_package_bytes)";
  uint64_t total = 0;
  std::unordered_set<std::string> names;
  std::string name(UINT16_MAX + 1, '\0');  // a zip name is at most 65535 bytes
  int status = unzGoToFirstFile(zip_.get());
  for (uint64_t i = 0; status == UNZ_OK; ++i, status = unzGoToNextFile(zip_.get())) {
    unz_file_info64 info{};
    unz64_file_pos position{};
    if (unzGetCurrentFileInfo64(zip_.get(), &info, name.data(), name.size(), nullptr, 0, nullptr,
                                0) != UNZ_OK ||
        unzGetFilePos64(zip_.get(), &position) != UNZ_OK) {
      fail("has an unreadable entry at index " + std::to_string(i));
    }
    ZipEntry entry{name.substr(0, info.size_filename), info.uncompressed_size,
                   position.pos_in_zip_directory, position.num_of_file, false};
    const std::string quoted = "entry '" + entry.name + "'";
    if (unsafe_entry_name(entry.name)) {
      fail("has an unsafe " + quoted +
           " (an absolute path, a '..' component or a backslash); refusing to extract it");
    }
    if (!names.insert(entry.name).second) {
      fail("is not a .pt2 package: two of its entries have the same name");
    }
    entry.directory = entry.name.back() == '/';
    const unsigned type = unix_file_type(info);
    const unsigned expected = entry.directory ? S_IFDIR : S_IFREG;
    if (type != 0 && type != expected) {
      fail("has an " + quoted + " that is " + file_type_name(type) + "; refusing to extract it");
    }
    if ((info.flag & 1) != 0) fail("has an encrypted " + quoted);  // general purpose bit 0
    if (info.compression_method != 0 && info.compression_method != Z_DEFLATED) {
      fail("has an " + quoted + " compressed with zip method " +
           std::to_string(info.compression_method) + " (tdaot reads stored and deflated entries)");
    }
    if (entry.size > max_unpacked_bytes) {
      fail("has an " + quoted + " that declares " + std::to_string(entry.size) + " bytes" +
           over_limit);
    }
    total += entry.size;  // no overflow: each term is at most the limit
    entries_.push_back(std::move(entry));
  }
  if (status != UNZ_END_OF_LIST_OF_FILE) {
    fail("is not a .pt2 package (a damaged or truncated zip archive: " + file_.error_text(status) +
         ")");
  }
  if (total > max_unpacked_bytes) {
    fail("declares " + std::to_string(total) + " bytes in all its entries" + over_limit);
  }
  // Every local header against the central directory (minizip compares names' lengths, methods,
  // CRCs and sizes when it opens an entry), which catches headers that disagree.
  for (const ZipEntry& entry : entries_) {
    const int opened = open_entry(entry);
    if (opened != UNZ_OK) {
      fail("is not a .pt2 package (a damaged or truncated zip archive: entry '" + entry.name +
           "': " + file_.error_text(opened) + ")");
    }
    unzCloseCurrentFile(zip_.get());  // nothing read: no CRC to compare
  }
}

int ZipArchive::open_entry(const ZipEntry& entry) const {
  const unz64_file_pos position{entry.directory_offset, entry.number};
  const int found = unzGoToFilePos64(zip_.get(), &position);
  return found != UNZ_OK ? found : unzOpenCurrentFile(zip_.get());
}

ZipArchive::~ZipArchive() = default;

void ZipArchive::Close::operator()(void* zip) const { unzClose(zip); }

void ZipArchive::fail(const std::string& problem) const {
  file_.require_unchanged();  // a minizip error that a changed file caused says so
  fail_path(path_, problem);
}

std::string ZipArchive::read(const ZipEntry& entry) const {
  std::string data;
  data.reserve(entry.size);
  read_into(entry, [&](std::string_view piece) { data.append(piece); });
  return data;
}

void ZipArchive::stream(const ZipEntry& entry,
                        const std::function<void(std::string_view)>& sink) const {
  const PackageFile::ReadsCoveredByDigest covered(file_);
  read_into(entry, sink);
}

void ZipArchive::read_into(const ZipEntry& entry,
                           const std::function<void(std::string_view)>& sink) const {
  const std::string quoted = "entry '" + entry.name + "'";
  const int opened = open_entry(entry);
  if (opened != UNZ_OK) fail("has an " + quoted + " that cannot be read: " + file_.error_text(opened));
  // Closed on every path; closing after the last byte is what compares the CRC.
  struct Closer {
    void* zip;
    ~Closer() { if (zip != nullptr) unzCloseCurrentFile(zip); }
  } closer{zip_.get()};
  char buffer[1 << 16];
  uint64_t done = 0;
  while (done < entry.size) {
    const auto want = static_cast<unsigned>(std::min<uint64_t>(sizeof buffer, entry.size - done));
    const int got = unzReadCurrentFile(zip_.get(), buffer, want);
    if (got < 0) fail("has a damaged " + quoted + ": " + file_.error_text(got));
    if (got == 0) {
      fail("has an " + quoted + " that holds " + std::to_string(done) + " bytes but declares " +
           std::to_string(entry.size));
    }
    done += static_cast<uint64_t>(got);
    sink(std::string_view(buffer, static_cast<size_t>(got)));
  }
  // minizip stops at the declared size; a deflated entry that holds more fails its CRC.
  char extra = 0;
  const int more = unzReadCurrentFile(zip_.get(), &extra, 1);
  if (more < 0) fail("has a damaged " + quoted + ": " + file_.error_text(more));
  if (more > 0) fail("has an " + quoted + " that holds more bytes than it declares");
  closer.zip = nullptr;
  const int closed = unzCloseCurrentFile(zip_.get());
  if (closed != UNZ_OK) fail("has a damaged " + quoted + ": " + file_.error_text(closed));
  file_.require_unchanged();
}

}  // namespace tdaot::detail
