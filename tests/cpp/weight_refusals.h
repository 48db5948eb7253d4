// The weight files every runtime must refuse, and what the refusal says: one list for the full
// runtime's tests (test_weights.cpp, test_weights_signature.cpp) and the lite runtime's
// (lite/test_lite_weights.cpp), so both are held to the same checks. Torch-free.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "fixtures.h"

namespace tdaot::test_weights {

// A file a swap refuses: the error's path() is `path`, its tensor() `tensor` ("" for the file as
// a whole; nullopt: not checked, as for a truncated file, where the tensor found outside the file
// depends on the file's layout), and its message holds "weight file '<path>'" and `message`.
struct Refusal {
  std::string path;
  std::optional<std::string> tensor;
  std::string message;
};

// Copies of weight file `weights` refused with WeightsError, written into `dir`: truncated, its
// last byte flipped (digest), a missing file; and `transposed` (tutorial_v2_transposed.tdw:
// the batch-1 model's first weight stored transposed, every digest right).
std::vector<Refusal> damaged_files(const fixtures::TempDir& dir, const std::string& weights,
                                   const std::string& transposed);

// Hostile files, refused by both runtimes before anything is loaded (issue 38): a directory,
// /dev/zero, a FIFO (neither read nor waited on), two entries sharing bytes, an entry past the
// file's end, mixed_constants' file and older_format's. Part of damaged_files.
std::vector<Refusal> hostile_files(const fixtures::TempDir& dir, const std::string& weights);

// A copy of `weights` in `dir` whose first model constant lifted from a weight (the same
// bytes as a weights/ entry) has one bit flipped and its digest recomputed: every other check
// passes, the lifted-constant check refuses it naming the constant; `tensor` gets its entry name.
std::string mixed_constants(const fixtures::TempDir& dir, const std::string& weights,
                            std::string* tensor);

// A copy of `weights` in `dir` labelled with the older format "tdaot-weights/1" (whose weights
// digest covered the weights/ entries alone), refused by its format name.
std::string older_format(const fixtures::TempDir& dir, const std::string& weights);

// A copy of `path` in `dir` with its last byte flipped; returns its path.
std::string flip_last_byte(const fixtures::TempDir& dir, const std::string& path);

// tutorial_signed_v2.tdw: tutorial_v2.tdw's tensors for tutorial_signed.pt2, signed with
// keys/private.pem.
std::string signed_weights();

// Its unsigned, other-key-signed and forged copies, refused with SignatureError by a policy of
// tutorial_signed.pt2 trusting keys/public.pem; `message` follows "weight file '<path>' ".
std::vector<Refusal> unvouched_files();

}  // namespace tdaot::test_weights
