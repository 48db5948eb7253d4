// The AOTInductor metadata JSON of a package's models, and the manifest it carries.
#include <nlohmann/json.hpp>

#include "core/package/package.h"
#include "tdaot/errors.h"

namespace tdaot::detail {

Metadata parse_metadata(const std::string& text, const std::string& entry,
                        const std::string& path) {
  const auto invalid = [&](const std::string& problem) {
    return PackageError(path, "package '" + path + "' has invalid AOTInductor metadata in '" +
                                  entry + "': " + problem);
  };
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw invalid(e.what());
  }
  if (!root.is_object()) throw invalid("expected a JSON object");
  Metadata metadata;
  for (const auto& [key, value] : root.items()) {
    if (!value.is_string()) throw invalid("the value of '" + key + "' is not a string");
    metadata.emplace(key, value.get<std::string>());
  }
  return metadata;
}

Manifest manifest_from_metadata(const Metadata& metadata, const std::string& path) {
  auto it = metadata.find(kManifestMetadataKey);
  if (it == metadata.end()) {
    throw ManifestError(path, "package '" + path + "' has no '" + kManifestMetadataKey +
                                  "' metadata: it was not built by tdaot.build");
  }
  return Manifest::from_json(it->second, path);
}

}  // namespace tdaot::detail
