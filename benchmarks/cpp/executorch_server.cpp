// tdaot-bench-executorch-server: ExecuTorch's C++ Module on the XNNPACK-lowered programs
// benchmarks/peers.py exported from the same ExportedProgram, one per batch (policy-b{B}.pte:
// ExecuTorch plans memory for static shapes), for the C++ batch-1 table ("ExecuTorch (C++)").
// Its threadpool is reset to one thread; each batch's inputs are set once (set_inputs), and each
// call is forward() alone on them.
#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>

#include <map>
#include <memory>

#include "peer_protocol.h"

// The wheel ships libexecutorch_threadpool.so but not threadpool.h: its two entry points used here.
namespace executorch::extension::threadpool {
class ThreadPool {
 public:
  bool _unsafe_reset_threadpool(uint32_t num_threads);
};
ThreadPool* get_threadpool();
}  // namespace executorch::extension::threadpool

namespace {

namespace et = executorch;
using et::aten::ScalarType;

ScalarType scalar_type(const std::string& dtype) {
  if (dtype == "float32") return ScalarType::Float;
  if (dtype == "uint8") return ScalarType::Byte;
  if (dtype == "int64") return ScalarType::Long;
  if (dtype == "bool") return ScalarType::Bool;
  throw std::runtime_error("no ExecuTorch type for " + dtype);
}

void check(et::runtime::Error error, const std::string& what) {
  if (error != et::runtime::Error::Ok)
    throw std::runtime_error(what + " failed (ExecuTorch error " + std::to_string(static_cast<int>(error)) + ")");
}

struct Bound {
  std::unique_ptr<et::extension::Module> module;
  std::vector<std::vector<uint8_t>> storage;
  std::vector<et::extension::TensorPtr> tensors;
};

class ExecuTorchPeer {
 public:
  // "path" holds "{batch}", replaced by each of "batches": every program is loaded here.
  bench::json load(const bench::json& request) {
    et::extension::threadpool::get_threadpool()->_unsafe_reset_threadpool(1);
    specs_ = bench::input_specs(request);
    bound_.clear();
    const std::string pattern = request.at("path");
    const size_t at = pattern.find("{batch}");
    if (at == std::string::npos) throw std::runtime_error("path without {batch}: " + pattern);
    bench::json served = bench::json::array();
    for (const int64_t batch : request.at("batches")) {
      std::string path = pattern;
      path.replace(at, 7, std::to_string(batch));
      if (std::ifstream(path).good()) bind(batch, path), served.push_back(batch);
    }
    return served;
  }

  void call(int64_t batch) {
    auto it = bound_.find(batch);
    if (it == bound_.end()) throw std::runtime_error("no program at batch " + std::to_string(batch));
    auto result = it->second.module->forward();
    if (!result.ok()) check(result.error(), "forward");
  }

 private:
  void bind(int64_t batch, const std::string& path) {
    Bound b;
    b.module = std::make_unique<et::extension::Module>(path, et::extension::Module::LoadMode::Mmap);
    check(b.module->load_forward(), "load_forward " + path);
    std::mt19937 gen(static_cast<uint32_t>(batch));
    std::vector<et::runtime::EValue> inputs;
    for (const bench::InputSpec& spec : specs_) {
      std::vector<et::aten::SizesType> sizes{static_cast<et::aten::SizesType>(batch)};
      int64_t count = batch;
      for (int64_t d : spec.shape) sizes.push_back(static_cast<et::aten::SizesType>(d)), count *= d;
      const ScalarType type = scalar_type(spec.dtype);
      b.storage.emplace_back(static_cast<size_t>(count) * et::runtime::elementSize(type));
      bench::fill(spec.dtype, b.storage.back().data(), count, gen);
      b.tensors.push_back(et::extension::from_blob(b.storage.back().data(), sizes, type));
      inputs.emplace_back(*b.tensors.back());
    }
    check(b.module->set_inputs(inputs), "set_inputs");
    bound_.emplace(batch, std::move(b));
  }

  std::vector<bench::InputSpec> specs_;
  std::map<int64_t, Bound> bound_;
};

}  // namespace

int main(int argc, char** argv) {
  ExecuTorchPeer peer;
  return bench::serve(peer, argc, argv);
}
