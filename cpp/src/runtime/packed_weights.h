// oneDNN's packed layout for the weights a model's linear layers hand to oneDNN's matmul
// (ModelSpec::packed_weights) and its convolutions to oneDNN's convolution
// (ModelSpec::packed_convolutions). The package holds them plain, as the model's own weights, so
// that a weight file can swap them; the generated calls (mkldnn._linear_pointwise,
// _convolution_pointwise) take either form, and on the packed one oneDNN skips repacking the
// weight on every call (benchmarks/README.md, "Layer by layer on the AMD EPYC" and "Convolutions
// packed at load"; outputs bit for bit the same).
// So the full runtime packs them once at load and again for each swap, and hands the packed
// tensors to AOTInductor's container as user-managed constants, which it keeps alive here.
#pragma once

#include <ATen/Tensor.h>
#include <torch/csrc/inductor/aoti_runner/model_container_runner.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/weights/weights_check.h"
#include "tdaot/manifest.h"

namespace tdaot::detail {

class PackedWeights {
 public:
  // The constants of `table` whose original names are `spec`'s packed_weights and its
  // packed_convolutions' weights. Throws PackageError, naming the package `path`, the model and
  // the name, for a name the model has no constant of.
  PackedWeights(const ModelSpec& spec, const ConstantTable& table, const std::string& path);
  // Whether `spec` lists any weight to pack.
  static bool wanted(const ModelSpec& spec) {
    return !spec.packed_weights.empty() || !spec.packed_convolutions.empty();
  }

  // At load: the live plain constants packed, and the packed ones made live.
  void pack_live(torch::inductor::AOTIModelContainerRunner& runner);
  // In a swap, once the plain constants `names`/`tensors` are in the inactive buffer: the ones
  // it packs, packed into that buffer too, before the swap makes it live.
  void pack_inactive(torch::inductor::AOTIModelContainerRunner& runner,
                     const std::vector<std::string>& names, const std::vector<at::Tensor>& tensors);
  // The runner's buffers traded places (swap_constant_buffer: a swap made live, or a rollback).
  void buffers_swapped() { live_.swap(inactive_); }

 private:
  // Packs `names`/`tensors`'s constants and hands them to the live or inactive buffer.
  void hand_over(torch::inductor::AOTIModelContainerRunner& runner,
                 const std::vector<std::string>& names, const std::vector<at::Tensor>& tensors,
                 bool inactive);

  // A constant to pack: its original name, and its convolution's geometry (none: a linear layer's).
  struct Packed {
    std::string fqn;
    std::optional<PackedConvolution> convolution;
  };
  // `fqn`'s constant in `table`, added to constants_ (the constructor's step for each name).
  void add(const ConstantTable& table, const std::string& fqn,
           std::optional<PackedConvolution> convolution);

  std::map<std::string, Packed> constants_;  // by the constants' names
  std::string path_;
  std::string model_;
  // The packed tensors each buffer holds: the container keeps only their addresses (user-managed
  // constants), so they live here, never moved, until their buffer gets another set.
  std::vector<at::Tensor> live_;
  std::vector<at::Tensor> inactive_;
};

}  // namespace tdaot::detail
