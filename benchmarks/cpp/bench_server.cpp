// tdaot-bench-server: the C++ side of benchmarks/run.py. One process holds one loaded model
// (TorchScript through torch::jit::load, AOTInductor's raw AOTIModelPackageLoader, or
// tdaot::Policy) and answers timing commands, so the Python driver can alternate between
// runtimes round by round the same way it does with its Python workers.
//
// Protocol: one JSON object per line on stdin, one JSON answer per line on stdout.
//   {"cmd": "load", "runtime": "torchscript|aoti|aoti-single-threaded|tdaot|tdaot-bound|
//                              tdaot-bound-graph", "path": P,
//    "inputs": [{"dtype": "float32", "shape": [48]}, ...],
//    "guard": "" | "inference_mode" | "no_grad",     (optional: a guard held around each call)
//    "device": "cpu" | "cuda"}                       (optional: where the inputs live; on cuda
//                                                     every timed call ends with a device sync)
//   {"cmd": "first", "batch": B}            -> seconds of the first call
//   {"cmd": "run", "batch": B, "iters": N, "min_iters": M, "max_seconds": S}
//                                           -> per-call latencies in ns, and their summary in
//                                              us (tdaot/stats.h: p50, p99, p999, max, mean)
//   {"cmd": "allocs", "batch": B, "calls": N}
//                                           -> malloc-family calls per call, from the counter
//                                              preloaded into the process ((count over 2N calls
//                                              - count over N calls) / N); null without one
//   {"cmd": "memory"}                       -> VmRSS and VmHWM (peak RSS) in KiB
//   {"cmd": "quit"}
// Every answer carries "ok"; failures carry "error" instead of crashing the driver.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <dlfcn.h>
#include <torch/cuda.h>
#include <torch/script.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tdaot/torch/binding.h"
#include "tdaot/torch/policy.h"
#include "peer_protocol.h"

namespace {

using json = nlohmann::json;

struct InputSpec {
  at::ScalarType dtype;
  std::vector<int64_t> shape;
};

at::ScalarType parse_dtype(const std::string& name) {
  static const std::map<std::string, at::ScalarType> names = {
      {"float32", at::kFloat}, {"float64", at::kDouble}, {"float16", at::kHalf},
      {"bfloat16", at::kBFloat16}, {"uint8", at::kByte}, {"int8", at::kChar},
      {"int16", at::kShort}, {"int32", at::kInt}, {"int64", at::kLong}, {"bool", at::kBool}};
  auto it = names.find(name);
  if (it == names.end()) throw std::runtime_error("unknown dtype " + name);
  return it->second;
}

// The same kind of values the Python workers feed: normal floats, full-range bytes, and
// false flags (is_init false is the steady state of a recurrent policy).
std::vector<at::Tensor> make_inputs(const std::vector<InputSpec>& specs, int64_t batch,
                                    const at::Device& device) {
  at::manual_seed(batch);
  std::vector<at::Tensor> out;
  for (const auto& spec : specs) {
    std::vector<int64_t> shape{batch};
    shape.insert(shape.end(), spec.shape.begin(), spec.shape.end());
    const auto options = at::TensorOptions().dtype(spec.dtype);
    if (spec.dtype == at::kBool) {
      out.push_back(at::zeros(shape, options));
    } else if (spec.dtype == at::kByte) {
      out.push_back(at::randint(0, 256, shape, options));
    } else if (c10::isIntegralType(spec.dtype, /*includeBool=*/false)) {
      out.push_back(at::randint(0, 10, shape, options));
    } else {
      out.push_back(at::randn(shape, options));
    }
    out.back() = out.back().to(device);
  }
  return out;
}

// Kernel of one runtime: load once, then call with inputs in positional order.
class Runner {
 public:
  virtual ~Runner() = default;
  virtual void call(const std::vector<at::Tensor>& inputs) = 0;
};

class TorchScriptRunner : public Runner {
 public:
  explicit TorchScriptRunner(const std::string& path) : module_(torch::jit::load(path)) {
    module_.eval();
  }
  void call(const std::vector<at::Tensor>& inputs) override {
    // What a user writes: IValues in, forward under InferenceMode.
    c10::InferenceMode guard;
    std::vector<c10::IValue> args(inputs.begin(), inputs.end());
    module_.forward(args);
  }

 private:
  torch::jit::Module module_;
};

class AotiRunner : public Runner {
 public:
  AotiRunner(const std::string& path, bool single_threaded)
      : loader_(path, "model", single_threaded) {}
  void call(const std::vector<at::Tensor>& inputs) override { loader_.run(inputs); }

 private:
  torch::inductor::AOTIModelPackageLoader loader_;
};

class TdaotRunner : public Runner {
 public:
  explicit TdaotRunner(const std::string& path) : policy_(path) {}
  void call(const std::vector<at::Tensor>& inputs) override { policy_.run_positional(inputs); }

 private:
  tdaot::Policy policy_;
};

// The bound run: one tdaot::Binding per batch size, its inputs written once when bound (a
// service writes its observations in place), then each call is b.run() alone; with
// cuda_graph, a replay of the CUDA graph captured when bound.
class BoundRunner : public Runner {
 public:
  BoundRunner(const std::string& path, bool cuda_graph) : policy_(path) {
    options_.cuda_graph = cuda_graph;
  }
  void call(const std::vector<at::Tensor>& inputs) override {
    const int64_t batch = inputs.front().size(0);
    auto it = bindings_.find(batch);
    if (it == bindings_.end()) {
      it = bindings_.emplace(batch, policy_.bind(batch, options_)).first;
      for (size_t i = 0; i < inputs.size(); ++i) it->second.inputs()[i].copy_(inputs[i]);
    }
    it->second.run();
  }

 private:
  tdaot::Policy policy_;
  tdaot::BindOptions options_;
  std::map<int64_t, tdaot::Binding> bindings_;
};

std::unique_ptr<Runner> make_runner(const std::string& runtime, const std::string& path) {
  if (runtime == "torchscript") return std::make_unique<TorchScriptRunner>(path);
  if (runtime == "aoti") return std::make_unique<AotiRunner>(path, false);
  if (runtime == "aoti-single-threaded") return std::make_unique<AotiRunner>(path, true);
  if (runtime == "tdaot") return std::make_unique<TdaotRunner>(path);
  if (runtime == "tdaot-bound") return std::make_unique<BoundRunner>(path, false);
  if (runtime == "tdaot-bound-graph") return std::make_unique<BoundRunner>(path, true);
  throw std::runtime_error("unknown runtime " + runtime);
}

// A runner called under a guard the caller holds: what tdaot could do inside run().
template <typename Guard>
class GuardedRunner : public Runner {
 public:
  explicit GuardedRunner(std::unique_ptr<Runner> inner) : inner_(std::move(inner)) {}
  void call(const std::vector<at::Tensor>& inputs) override {
    Guard guard;
    inner_->call(inputs);
  }

 private:
  std::unique_ptr<Runner> inner_;
};

std::unique_ptr<Runner> guarded(std::unique_ptr<Runner> runner, const std::string& guard) {
  if (guard.empty()) return runner;
  if (guard == "inference_mode") return std::make_unique<GuardedRunner<c10::InferenceMode>>(std::move(runner));
  if (guard == "no_grad") return std::make_unique<GuardedRunner<at::NoGradGuard>>(std::move(runner));
  throw std::runtime_error("unknown guard " + guard);
}

// The protocol loop, timing and allocation counts are peer_protocol.h's; this is the model.
class Server {
 public:
  json load(const json& request) {
    specs_.clear();
    inputs_.clear();
    device_ = at::Device(request.value("device", std::string("cpu")));
    for (const auto& spec : request.at("inputs")) {
      specs_.push_back({parse_dtype(spec.at("dtype")), spec.at("shape").get<std::vector<int64_t>>()});
    }
    runner_ = guarded(make_runner(request.at("runtime"), request.at("path")), request.value("guard", ""));
    return nullptr;  // every batch
  }

  // One call; on CUDA until the device has finished it (what a control loop waits for).
  void call(int64_t batch) {
    runner_->call(inputs_for(batch));
    if (device_.is_cuda()) torch::cuda::synchronize(device_.index());
  }

 private:
  const std::vector<at::Tensor>& inputs_for(int64_t batch) {
    auto it = inputs_.find(batch);
    if (it == inputs_.end()) it = inputs_.emplace(batch, make_inputs(specs_, batch, device_)).first;
    return it->second;
  }

  std::unique_ptr<Runner> runner_;
  at::Device device_ = at::kCPU;
  std::vector<InputSpec> specs_;
  std::map<int64_t, std::vector<at::Tensor>> inputs_;
};

}  // namespace

int main(int argc, char** argv) {
  at::set_num_threads(1);
  Server server;
  return bench::serve(server, argc, argv);
}
