#include "core/package/archive.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "tdaot/errors.h"

namespace tdaot::detail {
namespace {

struct FileCloser {
  void operator()(zip_file_t* file) const { zip_fclose(file); }
};

std::string libzip_error(zip_error_t* error) {
  std::string text = zip_error_strerror(error);
  zip_error_fini(error);
  return text;
}

// The file type bits of a Unix-made entry (0 when the archive does not record one).
unsigned unix_file_type(zip_t* zip, zip_uint64_t index) {
  zip_uint8_t opsys = 0;
  zip_uint32_t attributes = 0;
  if (zip_file_get_external_attributes(zip, index, 0, &opsys, &attributes) != 0) return 0;
  if (opsys != ZIP_OPSYS_UNIX) return 0;
  return (attributes >> 16) & S_IFMT;
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

// True when `name` is absolute, has a '..' component or contains a backslash: extracting it
// by name could write outside the destination directory.
bool unsafe_entry_name(std::string_view name) {
  if (name.empty() || name.front() == '/') return true;
  if (name.find('\\') != std::string_view::npos) return true;
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
    : path_(path), error_(std::make_unique<zip_error_t>()) {
  zip_error_init(error_.get());
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
  zip_error_fini(error_.get());
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

// libzip's view of a PackageFile: a seekable source whose reads go through PackageFile::read.
struct ZipSourceCallback {
  static zip_int64_t call(void* state, void* data, zip_uint64_t length, zip_source_cmd_t command) {
    auto& file = *static_cast<PackageFile*>(state);
    zip_error_t* error = file.error_.get();
    switch (command) {
      case ZIP_SOURCE_OPEN:
        file.position_ = 0;
        return 0;
      case ZIP_SOURCE_READ: {
        const int64_t got = file.read(file.position_, data, length, !file.covered_);
        if (got < 0) {
          zip_error_set(error, ZIP_ER_READ, errno);
          return -1;
        }
        file.position_ += static_cast<uint64_t>(got);
        return got;
      }
      case ZIP_SOURCE_CLOSE:
      case ZIP_SOURCE_FREE:  // the PackageFile owns itself
        return 0;
      case ZIP_SOURCE_STAT: {
        auto* stat = ZIP_SOURCE_GET_ARGS(zip_stat_t, data, length, error);
        if (stat == nullptr) return -1;
        zip_stat_init(stat);
        stat->size = file.size_;
        stat->valid |= ZIP_STAT_SIZE;
        return sizeof(zip_stat_t);
      }
      case ZIP_SOURCE_ERROR:
        return zip_error_to_data(error, data, length);
      case ZIP_SOURCE_SEEK: {
        const zip_int64_t to = zip_source_seek_compute_offset(file.position_, file.size_, data,
                                                              length, error);
        if (to < 0) return -1;
        file.position_ = static_cast<uint64_t>(to);
        return 0;
      }
      case ZIP_SOURCE_TELL:
        return static_cast<zip_int64_t>(file.position_);
      case ZIP_SOURCE_SUPPORTS:
        return zip_source_make_command_bitmap(ZIP_SOURCE_OPEN, ZIP_SOURCE_READ, ZIP_SOURCE_CLOSE,
                                              ZIP_SOURCE_STAT, ZIP_SOURCE_ERROR, ZIP_SOURCE_FREE,
                                              ZIP_SOURCE_SEEK, ZIP_SOURCE_TELL,
                                              ZIP_SOURCE_SUPPORTS, -1);
      default:
        zip_error_set(error, ZIP_ER_OPNOTSUPP, 0);
        return -1;
    }
  }
};

zip_source* PackageFile::zip_source_for() {
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* source = zip_source_function_create(&ZipSourceCallback::call, this, &error);
  if (source == nullptr) {
    fail_path(path_, "cannot be opened as a zip archive: " + libzip_error(&error));
  }
  zip_error_fini(&error);
  return source;
}

// --- the archive ----------------------------------------------------------------------------------

ZipArchive::ZipArchive(PackageFile& file, uint64_t max_unpacked_bytes)
    : file_(file), path_(file.path()) {
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* source = file_.zip_source_for();
  // ZIP_CHECKCONS compares the central directory with every local header, which catches
  // truncated copies and headers that disagree about names or sizes.
  // libzip also refuses two entries of one name (ZIP_ER_EXISTS) while it reads the directory.
  // Owned from here on, so it is discarded also when a check below refuses the package.
  zip_.reset(zip_open_from_source(source, ZIP_RDONLY | ZIP_CHECKCONS, &error));
  if (!zip_) {
    zip_source_free(source);
    if (zip_error_code_zip(&error) == ZIP_ER_EXISTS) {
      zip_error_fini(&error);
      fail("is not a .pt2 package: two of its entries have the same name");
    }
    fail("is not a .pt2 package (a damaged or truncated zip archive: " + libzip_error(&error) +
         ")");
  }
  zip_error_fini(&error);

  const zip_int64_t count = zip_get_num_entries(zip_.get(), 0);
  if (count <= 0) fail("is an empty zip archive, not a .pt2 package");
  const std::string over_limit = ", more than the limit of " +
                                 std::to_string(max_unpacked_bytes) + " (max_package_bytes)";
  uint64_t total = 0;
  for (zip_int64_t i = 0; i < count; ++i) {
    const auto index = static_cast<zip_uint64_t>(i);
    zip_stat_t stat;
    if (zip_stat_index(zip_.get(), index, 0, &stat) != 0 || (stat.valid & ZIP_STAT_NAME) == 0) {
      fail("has an unreadable entry at index " + std::to_string(i) + ": " +
           zip_strerror(zip_.get()));
    }
    ZipEntry entry{stat.name, stat.size, index, false};
    const std::string quoted = "entry '" + entry.name + "'";
    if (unsafe_entry_name(entry.name)) {
      fail("has an unsafe " + quoted +
           " (an absolute path, a '..' component or a backslash); refusing to extract it");
    }
    entry.directory = entry.name.back() == '/';
    const unsigned type = unix_file_type(zip_.get(), index);
    const unsigned expected = entry.directory ? S_IFDIR : S_IFREG;
    if (type != 0 && type != expected) {
      fail("has an " + quoted + " that is " + file_type_name(type) + "; refusing to extract it");
    }
    if ((stat.valid & ZIP_STAT_ENCRYPTION_METHOD) && stat.encryption_method != ZIP_EM_NONE) {
      fail("has an encrypted " + quoted);
    }
    if ((stat.valid & ZIP_STAT_COMP_METHOD) && stat.comp_method != ZIP_CM_STORE &&
        stat.comp_method != ZIP_CM_DEFLATE) {
      fail("has an " + quoted + " compressed with zip method " +
           std::to_string(stat.comp_method) + " (tdaot reads stored and deflated entries)");
    }
    if ((stat.valid & ZIP_STAT_SIZE) == 0) fail("has an " + quoted + " of unknown size");
    if (entry.size > max_unpacked_bytes) {
      fail("has an " + quoted + " that declares " + std::to_string(entry.size) + " bytes" +
           over_limit);
    }
    total += entry.size;  // no overflow: each term is at most the limit
    entries_.push_back(std::move(entry));
  }
  if (total > max_unpacked_bytes) {
    fail("declares " + std::to_string(total) + " bytes in all its entries" + over_limit);
  }
}

ZipArchive::~ZipArchive() = default;

void ZipArchive::Discard::operator()(struct zip* zip) const { zip_discard(zip); }

void ZipArchive::fail(const std::string& problem) const {
  file_.require_unchanged();  // a libzip error that a changed file caused says so
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
  std::unique_ptr<zip_file_t, FileCloser> file(zip_fopen_index(zip_.get(), entry.index, 0));
  if (!file) fail("has an " + quoted + " that cannot be read: " + zip_strerror(zip_.get()));
  char buffer[1 << 16];
  uint64_t done = 0;
  while (done < entry.size) {
    const uint64_t want = std::min<uint64_t>(sizeof buffer, entry.size - done);
    const zip_int64_t got = zip_fread(file.get(), buffer, want);
    if (got < 0) {
      fail("has a damaged " + quoted + ": " + zip_file_strerror(file.get()));
    }
    if (got == 0) {
      fail("has an " + quoted + " that holds " + std::to_string(done) + " bytes but declares " +
           std::to_string(entry.size));
    }
    done += static_cast<uint64_t>(got);
    sink(std::string_view(buffer, static_cast<size_t>(got)));
  }
  // Reading on to the end makes libzip compare the CRC, and shows data beyond the size.
  char extra = 0;
  const zip_int64_t more = zip_fread(file.get(), &extra, 1);
  if (more < 0) fail("has a damaged " + quoted + ": " + zip_file_strerror(file.get()));
  if (more > 0) fail("has an " + quoted + " that holds more bytes than it declares");
  file_.require_unchanged();
}

}  // namespace tdaot::detail
