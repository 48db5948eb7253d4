// tdaot-bench-lite-server: the lite runtime's side of benchmarks/run.py ("tdaot lite, bound
// (C++)"). Linked only to tdaot::lite (no libtorch or c10 in the process), it speaks the
// protocol of bench_server.cpp (peer_protocol.h), so the driver times it in the same rounds, rotated with the
// other runtimes, beside the full runtime's bound row ("tdaot native, bound (C++)").
//
// Protocol: one JSON object per line on stdin, one JSON answer per line on stdout.
//   {"cmd": "load", "runtime": "tdaot-lite-bound", "path": P}
//                                           -> seconds, and "batch_sizes": what the package's
//                                              lite models serve (the driver times only those)
//   {"cmd": "first", "batch": B}            -> seconds of the first call (bind + first run)
//   {"cmd": "run", "batch": B, "iters": N, "min_iters": M, "max_seconds": S}
//                                           -> per-call latencies in ns, and their summary in us
//   {"cmd": "allocs", "batch": B, "calls": N}
//                                           -> malloc-family calls per call, from the counter
//                                              preloaded into the process ((count over 2N calls
//                                              - count over N calls) / N); null without one
//   {"cmd": "memory"}                       -> VmRSS and VmHWM (peak RSS) in KiB
//   {"cmd": "quit"}
//
// The bound run as the full runtime's BoundRunner does it: one lite::Binding per batch size, its
// inputs written once when bound (normal floats, full-range bytes, integers 0..9, false flags:
// the same kinds of values as the C++ server's, from a std::mt19937 seeded with the batch size
// instead of torch's generator), then each call is b.run() alone. A recurrent package's binding
// carries its state from call to call, as the full runtime's bound session does.
#include <map>
#include <memory>

#include "peer_protocol.h"
#include "tdaot/lite.h"

namespace {

using json = bench::json;

template <typename T, typename Draw>
void fill(void* data, int64_t count, Draw draw) {
  T* out = static_cast<T*>(data);
  for (int64_t i = 0; i < count; ++i) out[i] = static_cast<T>(draw());
}

void write_inputs(tdaot::lite::Binding& b, const tdaot::Manifest& manifest, int64_t batch) {
  std::mt19937 gen(static_cast<uint32_t>(batch));
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> byte(0, 255), small(0, 9);
  for (const tdaot::TensorSpec& spec : manifest.inputs) {
    int64_t count = 1;
    for (int64_t d : b.input_shape(spec.key)) count *= d;
    void* data = b.input_data(spec.key, spec.dtype);
    switch (spec.dtype) {
      case tdaot::DType::Float32: fill<float>(data, count, [&] { return normal(gen); }); break;
      case tdaot::DType::Float64: fill<double>(data, count, [&] { return normal(gen); }); break;
      case tdaot::DType::UInt8: fill<uint8_t>(data, count, [&] { return byte(gen); }); break;
      case tdaot::DType::Int8: fill<int8_t>(data, count, [&] { return small(gen); }); break;
      case tdaot::DType::Int16: fill<int16_t>(data, count, [&] { return small(gen); }); break;
      case tdaot::DType::Int32: fill<int32_t>(data, count, [&] { return small(gen); }); break;
      case tdaot::DType::Int64: fill<int64_t>(data, count, [&] { return small(gen); }); break;
      default:  // bool (is_init false: a recurrent policy's steady state); halves: zeros
        std::memset(data, 0, static_cast<size_t>(count) * tdaot::element_size(spec.dtype));
    }
  }
}

class LiteServer {
 public:
  // The driver times only "batch_sizes", what the package's lite models serve.
  json load(const json& request) {
    const std::string runtime = request.value("runtime", std::string("tdaot-lite-bound"));
    if (runtime != "tdaot-lite-bound") throw std::runtime_error("unknown runtime " + runtime);
    bindings_.clear();
    policy_.reset();
    policy_ = std::make_unique<tdaot::lite::Policy>(request.at("path").get<std::string>());
    return policy_->batch_sizes();
  }

  void call(int64_t batch) { binding(batch).run(); }

 private:
  tdaot::lite::Binding& binding(int64_t batch) {
    auto it = bindings_.find(batch);
    if (it == bindings_.end()) {
      it = bindings_.emplace(batch, policy_->bind(batch)).first;
      write_inputs(it->second, policy_->manifest(), batch);
    }
    return it->second;
  }

  std::unique_ptr<tdaot::lite::Policy> policy_;
  std::map<int64_t, tdaot::lite::Binding> bindings_;
};

}  // namespace

int main(int argc, char** argv) {
  LiteServer server;
  return bench::serve(server, argc, argv);
}
