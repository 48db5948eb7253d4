// Internal: the manifest names that only the package reader, the build stage (through tdaot._C),
// the runtimes' messages and the tools use, kept out of the public tdaot/manifest.h: a service
// never needs them (tests/python/test_cpp_layering.py checks that no public header has them).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tdaot/manifest.h"

namespace tdaot {

// Records torch's zip writer (PyTorchFileWriter, PT2ArchiveWriter) adds to every archive after
// the payload. The manifest, itself part of the payload, cannot hold their digests; they are
// never extracted.
inline constexpr std::array<std::string_view, 5> kBookkeepingRecords{
    "archive_format", "archive_version", "byteorder", ".data/version", ".data/serialization_id"};

// The archive file (under the top folder) holding a package's signatures, a JSON list of
// {key_id, alg, signature} over its manifest bytes (docs: security). Signing adds or replaces it
// without changing any other entry, so the manifest cannot list it.
inline constexpr std::string_view kSignatureEntry = "tdaot.sig";

// Whether the archive file `name` (without the archive's top folder) is left out of a
// manifest's "files": the bookkeeping records above, the signature entry and AOTInductor's
// metadata JSONs ("data/aotinductor/<model>/*_metadata.json"), which carry the manifest itself.
bool digest_exempt(std::string_view name);

// Whether parse_manifest requires the file digests. Every package's manifest is sealed ("files"
// lists every file); the build stage checks the manifest it hands AOTInductor before the
// compiled files exist (unsealed: no "files"), and again once it is sealed.
enum class Sealing { sealed, unsealed };

// Manifest::from_json with the sealing chosen: the one parser both read through.
Manifest parse_manifest(const std::string& json, const std::string& origin, Sealing sealing);

// The manifest's dtype names, in the schema's order.
std::vector<std::string> dtype_names();

// Formats a shape as "[a, b, c]" for messages.
std::string format_shape(const std::vector<int64_t>& shape);
// Formats a per-sample shape behind its batch dim as "[B, a, b]" for messages.
std::string format_batched_shape(const std::vector<int64_t>& shape);

// The one dispatch rule (Manifest::model_for, and both runtimes among their loaded models): of
// the `count` models, `spec_at(i)` the i-th, the one whose range holds `batch` with the
// narrowest range, ties to the first. Returns its index, or `count` when none holds `batch`.
// No allocation: called on every run.
template <typename SpecAt>
size_t narrowest_model(size_t count, int64_t batch, const SpecAt& spec_at) {
  size_t best = count;
  for (size_t i = 0; i < count; ++i) {
    const BatchRange& range = spec_at(i).batch;
    if (!range.contains(batch)) continue;
    // Compared as max - min: ranges are within int64 and min >= 1, so no overflow.
    if (best == count || range.max - range.min < spec_at(best).batch.max - spec_at(best).batch.min) {
      best = i;
    }
  }
  return best;
}

}  // namespace tdaot
