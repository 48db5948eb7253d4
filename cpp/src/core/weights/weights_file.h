// Internal: a tdaot weight file (tdaot.export_weights), read and checked as a whole. Torch-free:
// both runtimes read weight files through it (the full runtime's Policy::swap_weights and
// verify_weights, the lite runtime's lite::Policy::swap_weights).
//
// The format is safetensors: 8 bytes little-endian header length, a JSON header (each tensor's
// dtype, shape and byte range; "__metadata__" strings), then the tensor bytes. tdaot's entries:
//   weights/<name>          the policy's parameters and buffers by name (torch.export's names)
//   model/<model>/<const>   every constant model <model> of the package needs, by AOTInductor's
//                           internal name (packed ones included), as compiled for this package
// and metadata "tdaot.format" (kWeightsFormat), "tdaot.base_sha256" (the package file it was
// made for), "tdaot.base_manifest_sha256" (that package's manifest bytes: what a swap checks,
// since signing the package changes its file but not its manifest), "tdaot.weights_sha256"
// (canonical_digest of every entry by its full name: the weights/ entries and every model's
// constants, so that the digest a policy reports once the file is live covers every byte its
// models run) and, reserved for signatures, "tdaot.signatures": never part of what is digested
// or signed (weights_signing_payload). Format 1 (kWeightsFormat1) digested the weights/
// entries alone; its files are refused by their format name.
// python/tdaot/builder/weights_format.py is the Python twin.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/package/signature.h"
#include "tdaot/dtype.h"

namespace tdaot::detail {

inline constexpr const char* kWeightsFormat = "tdaot-weights/2";
// The format before: its weights digest left the models' constants out.
inline constexpr const char* kWeightsFormat1 = "tdaot-weights/1";
// The largest weight file read (its bytes are held in memory while read and checked).
inline constexpr uint64_t kMaxWeightFileBytes = uint64_t{16} << 30;
// The metadata entry holding the file's signatures (signature.h's JSON list, as a string).
inline constexpr const char* kWeightsSignaturesKey = "tdaot.signatures";

// One tensor of a weight file: contiguous bytes of its own, 64-byte aligned (what a model's
// kernels may assume of a constant), shared by copies.
struct WeightTensor {
  DType dtype = DType::Float32;
  std::vector<int64_t> shape;
  size_t nbytes = 0;
  std::shared_ptr<void> data;
};

struct WeightFile {
  std::string path;
  std::string base_sha256;
  std::string base_manifest_sha256;
  std::string weights_sha256;  // canonical_digest of every tensor, checked when read
  std::map<std::string, std::string> metadata;   // every "__metadata__" entry
  std::map<std::string, WeightTensor> tensors;   // by full name
};

// Reads and checks `path`: a regular file of at most kMaxWeightFileBytes (a directory, device or
// FIFO is refused before a byte is read); safetensors structure (header, byte ranges inside the
// file, no two entries sharing a byte), tdaot's metadata, its digest, every value finite,
// all on the file's bytes before any tensor is copied out (memory: about twice the file). Throws
// WeightsError naming the file and the tensor at fault.
WeightFile read_weight_file(const std::string& path);

// read_weight_file's checks (and, when `trusted` is not empty, the signature) on `bytes`, as if
// read from `path`: the entry point of the weight-file fuzz target (tests/fuzz).
WeightFile read_weight_bytes(const std::string& bytes, const std::string& path,
                             const std::vector<PublicKey>& trusted = {});

// sha256 over the tensors in name order: for each, "<name>\n<dtype>\n<d0,d1,...>\n<nbytes>\n"
// then its bytes (dtype as safetensors spells it: F32, I64, BOOL, ...).
std::string canonical_digest(const std::map<std::string, WeightTensor>& tensors);

// The exact bytes a signature over the weight file covers (everything but its signatures).
std::string weights_signing_payload(const WeightFile& file);

// Checks that the read and checked `file` carries a valid signature of its signing payload by
// one of `trusted` (not empty); returns that key's id. Throws SignatureError naming the file
// (verify_signatures): unsigned or its signature entry removed, signed only by other keys, or
// its header changed after signing. A changed tensor under an unchanged header never gets
// here: read_weight_file refuses it by its digest (WeightsError).
std::string verify_weights_signature(const WeightFile& file, const std::vector<PublicKey>& trusted);

// What a swap reads first: read_weight_file's checks, then, when `trusted` is not empty,
// verify_weights_signature, before any tensor is materialised and before anything about the
// file is compared with a package (an unvouched file gets no further than its own digests).
WeightFile read_swap_file(const std::string& path, const std::vector<PublicKey>& trusted);

// `tensor` (contiguous, as a weight file holds every tensor) with each element moved to where
// `strides` (in elements, one per dim, none negative) place it: the layout the model compiled the
// constant in, which its kernels index with no regard to the strides of the tensor they are
// handed (a bound convolution's weight is channels-last). Contiguous or empty `strides`: `tensor`
// itself, sharing its bytes.
WeightTensor in_layout(const WeightTensor& tensor, const std::vector<int64_t>& strides);

// Throws WeightsError: "weight file '<path>': tensor '<tensor>' <problem>" (no tensor part
// when `tensor` is empty).
[[noreturn]] void refuse_weights(const std::string& path, const std::string& tensor,
                                 const std::string& problem);

// The safetensors dtype code of `dtype` ("F32").
std::string safetensors_dtype(DType dtype);

}  // namespace tdaot::detail
