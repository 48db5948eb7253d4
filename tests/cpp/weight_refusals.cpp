#include "weight_refusals.h"

#include "core/package/signature.h"

namespace tdaot::test_weights {
namespace {

std::string key_id(const std::string& key) { return detail::load_public_keys({key}, "")[0].id; }

}  // namespace

std::vector<Refusal> damaged_files(const fixtures::TempDir& dir, const std::string& weights,
                                   const std::string& transposed) {
  const std::string bytes = fixtures::read_file(weights);
  const std::string truncated = dir.file("truncated.tdw");
  fixtures::write_file(truncated, bytes.substr(0, bytes.size() / 2));
  return {{truncated, std::nullopt, "(truncated?)"},
          {flip_last_byte(dir, weights), "", "does not match its digest"},
          {dir.file("missing.tdw"), "", "cannot be opened"},
          {transposed, "model/b1/module_module_0_module_0_weight",
           "has shape [3, 64], but model 'b1' takes [64, 3]"}};
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
