// tdaot::Binding: inputs and outputs preallocated for one batch size, run in place.
//
//   tdaot::Policy policy("policy.pt2");
//   tdaot::Binding b = policy.bind(1);
//   at::Tensor observation = b.input("observation");  // views of the binding's own storage
//   at::Tensor action = b.output("action");
//   for (;;) {
//     observation.copy_(read_sensors());  // write inputs in place
//     b.run();                            // outputs are written in place
//     send(action);
//   }
//
// Shapes and dtypes are fixed when bound, so run() validates nothing per call. When the package
// holds a model specialised for the bound batch size that exports AOTInductor's minimal arrayref
// interface (tdaot.build's default tuning "auto" builds one for batch 1; CPU only), run() calls
// that model's plain C entry point on the binding's own buffers and copies each output into
// the output tensors: zero heap allocations per call in steady state, counting every
// malloc-family call in the process. The binding holds its own instance of that model (and
// so its own copy of the model's weights). Otherwise (no such model for the batch, a CUDA
// package) run() goes through AOTInductor's runner, which allocates its outputs each call,
// and copies them into the output tensors; allocation_free() says which path a binding takes.
//
// CUDA packages: BindOptions::cuda_graph captures the bound run (the model and the copies into
// the output tensors) as a CUDA graph when bound, and run() replays it on the caller's current
// CUDA stream: one launch per call instead of the model's kernels and AOTInductor's host work.
// The graph keeps a runner (and so a copy of the weights on the GPU) of its own. run() returns
// once the graph is enqueued: synchronize the stream (or copy the outputs to the host, which
// does) before reading the outputs on the CPU, as after any CUDA work.
//
// Write inputs and read outputs in place (copy_, indexing); never resize_() or set_() them:
// run() throws tdaot::Error when a tensor no longer has the memory it was bound with.
//
// Recurrent packages: a Binding of a recurrent package is a bound session. It starts like a
// Session (state zero, is_init true for every row); after each run() it copies each state
// output into its state input and clears is_init; reset() and reset(mask) mark rows as new. The
// state inputs and is_init are among inputs(): reading the state is fine, writing it replaces
// what the next run sees; setting rows of is_init marks them as new for the next run only (the
// model sees them, as it sees reset(mask)'s; cleared after every run).
//
// BindOptions::envelope puts the safety envelope of tdaot::Session around every run (the same
// rules, the same code as the lite runtime's): a run with a non-finite element leaves the
// previous outputs (and the state) in place, outputs with a contract max_delta are rate
// limited; interventions() counts both. On CPU it reads and writes the bound memory directly
// and allocates nothing; on CUDA it copies through host memory (and so synchronises).
//
// Thread-safety: a Binding is for one thread at a time (one per control loop). A run() or
// reset() while another call on the same binding is running throws tdaot::Error instead of
// racing. Bindings of one Policy are independent and may run concurrently; a binding keeps the
// loaded model alive even if the Policy is destroyed. Movable, not copyable.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tdaot/bind_options.h"
#include "tdaot/binding_base.h"
#include "tdaot/envelope.h"
#include "tdaot/errors.h"
#include "tdaot/manifest.h"

namespace tdaot {

// The full runtime's bound run: what both runtimes' Binding offer (tdaot/binding_base.h: batch,
// model, run, reset, reset(rows), interventions) over at::Tensor buffers.
class Binding : public BindingBase {
 public:
  // Whether run() takes the allocation-free path (see above).
  bool allocation_free() const;
  // Whether run() replays a CUDA graph captured when bound (BindOptions::cuda_graph).
  bool cuda_graph() const;

  // The input tensor [batch, *shape] of manifest key `key`, a view of the binding's storage.
  // Throws UnknownKeyError naming the key and listing the inputs.
  at::Tensor input(const std::string& key) const;
  // The output tensor of manifest key `key`; throws UnknownKeyError like input().
  at::Tensor output(const std::string& key) const;
  // Every input, in manifest order (the order Policy::run_positional takes).
  const std::vector<at::Tensor>& inputs() const;
  // Every output, in manifest order.
  const std::vector<at::Tensor>& outputs() const;

  using BindingBase::reset;
  // reset(rows) for the rows where `mask` (bool [batch], on the policy's device) is true.
  void reset(const at::Tensor& mask);

 private:
  friend class Policy;
  struct Impl;  // defined in src/runtime/binding.cpp
  explicit Binding(std::unique_ptr<Impl> impl);
};

}  // namespace tdaot
