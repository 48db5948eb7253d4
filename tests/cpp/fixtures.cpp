#include "fixtures.h"

#include <cxxabi.h>
#include <zip.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <vector>

namespace tdaot::fixtures {

namespace fs = std::filesystem;

std::string package_path(const std::string& name) {
  const char* dir = std::getenv("TDAOT_TEST_PACKAGES");
  if (dir == nullptr || *dir == '\0') {
    ADD_FAILURE() << "TDAOT_TEST_PACKAGES is not set; run the tests through ctest, whose "
                     "build_test_packages fixture writes the packages";
    return "TDAOT_TEST_PACKAGES-unset/" + name;
  }
  return (fs::path(dir) / name).string();
}

const nlohmann::json& json_file(const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, nlohmann::json> parsed;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto found = parsed.find(name);
  if (found != parsed.end()) return found->second;
  const std::string path = package_path(name);
  std::ifstream in(path);
  if (!in) {
    ADD_FAILURE() << "cannot read " << path << " (a test fixture file)";
    return parsed[name] = nlohmann::json::object();
  }
  return parsed[name] = nlohmann::json::parse(in);
}

TempDir::TempDir() {
  std::random_device random;
  for (;;) {
    path_ = fs::temp_directory_path() / ("tdaot-test-" + std::to_string(random()));
    if (fs::create_directory(path_)) return;
  }
}

TempDir::~TempDir() {
  std::error_code ignored;
  fs::remove_all(path_, ignored);
}

std::string TempDir::file(const std::string& name) const { return (path_ / name).string(); }

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "cannot read " << path;
    return "";
  }
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void edit_zip(const std::string& src, const std::string& dst, const EntryEdit& edit,
              const std::map<std::string, std::string>& extra,
              const std::function<bool(const std::string& name)>& drop) {
  fs::copy_file(src, dst, fs::copy_options::overwrite_existing);
  int code = 0;
  zip_t* zip = zip_open(dst.c_str(), 0, &code);
  ASSERT_NE(zip, nullptr) << "libzip cannot open " << dst << " (error " << code << ")";
  // The buffers must live until zip_close writes them.
  std::vector<std::unique_ptr<std::string>> kept;
  const zip_int64_t entries = zip_get_num_entries(zip, 0);
  for (zip_int64_t i = 0; i < entries; ++i) {
    const std::string name = zip_get_name(zip, static_cast<zip_uint64_t>(i), 0);
    zip_stat_t stat;
    ASSERT_EQ(zip_stat_index(zip, static_cast<zip_uint64_t>(i), 0, &stat), 0) << name;
    auto bytes = std::make_unique<std::string>(stat.size, '\0');
    zip_file_t* file = zip_fopen_index(zip, static_cast<zip_uint64_t>(i), 0);
    ASSERT_NE(file, nullptr) << name;
    const zip_int64_t read = zip_fread(file, bytes->data(), bytes->size());
    zip_fclose(file);
    ASSERT_EQ(read, static_cast<zip_int64_t>(stat.size)) << name;
    if (drop && drop(name)) {
      ASSERT_EQ(zip_delete(zip, static_cast<zip_uint64_t>(i)), 0) << name;
      continue;
    }
    if (!edit(name, *bytes)) continue;
    zip_source_t* source = zip_source_buffer(zip, bytes->data(), bytes->size(), 0);
    ASSERT_NE(source, nullptr) << name;
    ASSERT_EQ(zip_file_replace(zip, static_cast<zip_uint64_t>(i), source, 0), 0)
        << name << ": " << zip_strerror(zip);
    zip_set_file_compression(zip, static_cast<zip_uint64_t>(i), ZIP_CM_STORE, 0);
    kept.push_back(std::move(bytes));
  }
  for (const auto& [name, bytes] : extra) {
    kept.push_back(std::make_unique<std::string>(bytes));
    zip_source_t* source = zip_source_buffer(zip, kept.back()->data(), kept.back()->size(), 0);
    ASSERT_NE(source, nullptr) << name;
    ASSERT_GE(zip_file_add(zip, name.c_str(), source, ZIP_FL_ENC_UTF_8), 0)
        << name << ": " << zip_strerror(zip);
  }
  ASSERT_EQ(zip_close(zip), 0) << "libzip cannot write " << dst;
}

std::string type_name(const std::type_info& type) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
  std::string name = status == 0 && demangled != nullptr ? demangled : type.name();
  std::free(demangled);
  return name;
}

::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\"\ndoes not contain\n\"" << part
                                       << "\"";
}

}  // namespace tdaot::fixtures
