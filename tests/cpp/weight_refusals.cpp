#include "weight_refusals.h"

#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/package/signature.h"
#include "core/weights/weights_file.h"

namespace tdaot::test_weights {
namespace {

std::string key_id(const std::string& key) { return detail::load_public_keys({key}, "")[0].id; }

// A safetensors file of `header` (JSON) and `data_bytes` zero bytes of data.
std::string safetensors(const nlohmann::json& header, size_t data_bytes) {
  const std::string text = header.dump();
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  return bytes + text + std::string(data_bytes, '\0');
}

nlohmann::json entry(uint64_t begin, uint64_t end, int64_t count) {
  return {{"dtype", "F32"},
          {"shape", nlohmann::json::array({count})},
          {"data_offsets", nlohmann::json::array({begin, end})}};
}

}  // namespace

std::string mixed_constants(const fixtures::TempDir& dir, const std::string& weights,
                            std::string* tensor) {
  std::string bytes = fixtures::read_file(weights);
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  const auto header = nlohmann::json::parse(bytes.substr(8, header_size));
  detail::WeightFile file = detail::read_weight_file(weights);
  for (auto& [name, constant] : file.tensors) {
    if (name.rfind("model/", 0) != 0) continue;
    for (const auto& [other, weight] : file.tensors) {
      if (other.rfind("weights/", 0) != 0 || weight.dtype != constant.dtype ||
          weight.shape != constant.shape || weight.nbytes != constant.nbytes ||
          weight.nbytes == 0 ||
          std::memcmp(weight.data.get(), constant.data.get(), weight.nbytes) != 0) {
        continue;
      }
      // The constant lifted from `other`: one low bit of its first element flipped (a finite
      // value stays finite), the digest recomputed: only the lifted-constant check refuses it.
      const uint64_t begin = header.at(name).at("data_offsets").at(0).get<uint64_t>();
      bytes[8 + header_size + begin] = static_cast<char>(bytes[8 + header_size + begin] ^ 1);
      auto copy = std::shared_ptr<void>(std::malloc(constant.nbytes), [](void* p) { std::free(p); });
      std::memcpy(copy.get(), constant.data.get(), constant.nbytes);
      static_cast<unsigned char*>(copy.get())[0] ^= 1;
      constant.data = copy;
      const std::string digest = detail::canonical_digest(file.tensors);
      const size_t at = bytes.find(file.weights_sha256);
      if (at == std::string::npos || at > 8 + header_size) throw std::runtime_error("no digest");
      bytes.replace(at, digest.size(), digest);
      const std::string path = dir.file("mixed_constants.tdw");
      fixtures::write_file(path, bytes);
      *tensor = name;
      return path;
    }
  }
  throw std::runtime_error("no constant of '" + weights + "' equals one of its weights");
}

std::vector<Refusal> hostile_files(const fixtures::TempDir& dir, const std::string& weights) {
  namespace fs = std::filesystem;
  const std::string directory = dir.file("a_directory.tdw");
  fs::create_directory(directory);
  const std::string fifo = dir.file("a_fifo.tdw");
  if (::mkfifo(fifo.c_str(), 0600) != 0) throw std::runtime_error("mkfifo failed");
  const std::string overlapping = dir.file("overlapping.tdw");
  // Two entries over the same 8 bytes (64 of them over 16 MiB once cost 2 GiB before the digest).
  nlohmann::json two = nlohmann::json::object();
  two["weights/a"] = entry(0, 8, 2);
  two["weights/b"] = entry(0, 8, 2);
  fixtures::write_file(overlapping, safetensors(two, 8));
  const std::string outside = dir.file("outside.tdw");
  nlohmann::json one = nlohmann::json::object();
  one["weights/a"] = entry(0, 16, 4);
  fixtures::write_file(outside, safetensors(one, 8));
  std::string constant;
  const std::string mixed = mixed_constants(dir, weights, &constant);
  const std::string format_1 = older_format(dir, weights);
  return {{directory, "", "is a directory, not a weight file"},
          {"/dev/zero", "", "is not a regular file"},
          {fifo, "", "is not a regular file"},
          {overlapping, "weights/b", "overlaps tensor 'weights/a' (bytes 0..8 and 0..8 of the data)"},
          {outside, "weights/a", "has data_offsets [0, 16], outside the file's 8 data bytes"},
          {mixed, constant, "differs from 'weights/"},
          {format_1, "",
           "has format 'tdaot-weights/1', whose weights digest leaves its models' constants out; "
           "this runtime reads 'tdaot-weights/2' (export it again with tdaot.export_weights)"}};
}

std::string older_format(const fixtures::TempDir& dir, const std::string& weights) {
  std::string bytes = fixtures::read_file(weights);
  const std::string format = "\"tdaot-weights/2\"";
  const size_t at = bytes.find(format);
  if (at == std::string::npos) throw std::runtime_error("no format in '" + weights + "'");
  bytes.replace(at, format.size(), "\"tdaot-weights/1\"");  // same length: the header stays valid
  const std::string path = dir.file("format_1.tdw");
  fixtures::write_file(path, bytes);
  return path;
}

std::vector<Refusal> damaged_files(const fixtures::TempDir& dir, const std::string& weights,
                                   const std::string& transposed) {
  const std::string bytes = fixtures::read_file(weights);
  const std::string truncated = dir.file("truncated.tdw");
  fixtures::write_file(truncated, bytes.substr(0, bytes.size() / 2));
  std::vector<Refusal> refusals = hostile_files(dir, weights);
  const std::vector<Refusal> damaged = {{truncated, std::nullopt, "(truncated?)"},
          {flip_last_byte(dir, weights), "", "does not match its digest"},
          {dir.file("missing.tdw"), "", "cannot be opened"},
          {transposed, "model/b1/module_module_0_module_0_weight",
           "has shape [3, 64], but model 'b1' takes [64, 3]"}};
  refusals.insert(refusals.end(), damaged.begin(), damaged.end());
  return refusals;
}

std::string flip_last_byte(const fixtures::TempDir& dir, const std::string& path) {
  std::string bytes = fixtures::read_file(path);
  bytes.back() = static_cast<char>(bytes.back() ^ 1);
  const std::string flipped = dir.file("flipped.tdw");
  fixtures::write_file(flipped, bytes);
  return flipped;
}

std::string signed_weights() { return fixtures::package_path("tutorial_signed_v2.tdw"); }

std::vector<Refusal> unvouched_files() {
  const std::string key = fixtures::package_path("keys/public.pem");
  const std::string ours = key_id(key);
  const std::string theirs = key_id(fixtures::package_path("other_keys/public.pem"));
  return {{fixtures::package_path("tutorial_signed_v2_unsigned.tdw"), "",
           "is not signed, but trusted keys are set (trusted key ids: " + ours},
          {fixtures::package_path("tutorial_signed_v2_other.tdw"), "",
           "is signed only by keys that are not trusted (key ids: " + theirs +
               "; trusted key ids: " + ours + ")"},
          {fixtures::package_path("tutorial_signed_v2_forged.tdw"), "",
           "has a signature by trusted key " + ours + " (trusted key file '" + key +
               "') that does not match its header: the header was changed after it was signed"}};
}

}  // namespace tdaot::test_weights
