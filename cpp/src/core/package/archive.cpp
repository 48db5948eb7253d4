#include "core/package/archive.h"

#include <sys/stat.h>
#include <zip.h>

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

}  // namespace

ZipArchive::ZipArchive(std::string_view bytes, std::string path, uint64_t max_unpacked_bytes)
    : path_(std::move(path)) {
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* source = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &error);
  if (source == nullptr) fail("cannot be opened as a zip archive: " + libzip_error(&error));
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
  throw PackageError(path_, "package '" + path_ + "' " + problem);
}

std::string ZipArchive::read(const ZipEntry& entry) const {
  const std::string quoted = "entry '" + entry.name + "'";
  std::unique_ptr<zip_file_t, FileCloser> file(zip_fopen_index(zip_.get(), entry.index, 0));
  if (!file) fail("has an " + quoted + " that cannot be read: " + zip_strerror(zip_.get()));
  std::string data(entry.size, '\0');
  uint64_t done = 0;
  while (done < entry.size) {
    const zip_int64_t got = zip_fread(file.get(), data.data() + done, entry.size - done);
    if (got < 0) {
      fail("has a damaged " + quoted + ": " + zip_file_strerror(file.get()));
    }
    if (got == 0) {
      fail("has an " + quoted + " that holds " + std::to_string(done) + " bytes but declares " +
           std::to_string(entry.size));
    }
    done += static_cast<uint64_t>(got);
  }
  // Reading on to the end makes libzip compare the CRC, and shows data beyond the size.
  char extra = 0;
  const zip_int64_t more = zip_fread(file.get(), &extra, 1);
  if (more < 0) fail("has a damaged " + quoted + ": " + zip_file_strerror(file.get()));
  if (more > 0) fail("has an " + quoted + " that holds more bytes than it declares");
  return data;
}

}  // namespace tdaot::detail
