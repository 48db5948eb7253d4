// Internal: reading the AOTInductor metadata (and with it the manifest) of a .pt2 package
// without loading its compiled library.
#pragma once

#include <exception>
#include <mutex>
#include <string>
#include <unordered_map>

#include "tdaot/manifest.h"

namespace tdaot::detail {

using Metadata = std::unordered_map<std::string, std::string>;

// The model name tdaot.build writes (PolicyOptions::model_name defaults to it).
inline constexpr const char* kDefaultModelName = "model";

// Reads the metadata AOTInductor stored for model `model_name`. Throws PackageError naming
// the path when the file is missing, a directory, unreadable or not a .pt2 archive.
Metadata read_package_metadata(const std::string& path, const std::string& model_name);

// Parses the manifest stored under kManifestMetadataKey; throws ManifestError naming the path.
Manifest manifest_from_metadata(const Metadata& metadata, const std::string& path);

// torch's model_package_loader.cpp parses every metadata JSON into one function-local static
// nlohmann::json, so concurrent package loads race. Hold this lock around any AOTI call that
// reads package metadata (load_metadata_from_package and the loader's constructor).
std::mutex& aoti_metadata_mutex();

// e.what() without the C++ backtrace c10::Error appends, for one-line messages.
std::string exception_text(const std::exception& e);

}  // namespace tdaot::detail
