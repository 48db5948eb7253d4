// tdaot-bench-lite-server: the lite runtime's side of benchmarks/run.py ("tdaot lite, bound
// (C++)"). Linked only to tdaot::lite (no libtorch or c10 in the process), it speaks the
// protocol of bench_server.cpp, so the driver times it in the same rounds, rotated with the
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
#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tdaot/lite.h"
#include "tdaot/stats.h"

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

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

json memory() {
  std::ifstream status("/proc/self/status");
  json out = {{"ok", true}};
  std::string line;
  while (std::getline(status, line)) {
    for (const char* field : {"VmRSS", "VmHWM"}) {
      const std::string prefix = std::string(field) + ":";
      if (line.rfind(prefix, 0) == 0) out[std::string(field) + "_kib"] = std::stol(line.substr(prefix.size()));
    }
  }
  return out;
}

class Server {
 public:
  json handle(const json& request) {
    const std::string cmd = request.at("cmd");
    if (cmd == "load") return load(request);
    if (cmd == "memory") return memory();
    if (!policy_) throw std::runtime_error("no model loaded");
    if (cmd == "first") {
      const auto t0 = Clock::now();
      binding(request.at("batch")).run();
      return {{"ok", true}, {"seconds", std::chrono::duration<double>(Clock::now() - t0).count()}};
    }
    if (cmd == "run") return run(request);
    if (cmd == "allocs") return allocations(request);
    throw std::runtime_error("unknown command " + cmd);
  }

 private:
  json load(const json& request) {
    const std::string runtime = request.value("runtime", std::string("tdaot-lite-bound"));
    if (runtime != "tdaot-lite-bound") throw std::runtime_error("unknown runtime " + runtime);
    bindings_.clear();
    policy_.reset();
    const auto t0 = Clock::now();
    policy_ = std::make_unique<tdaot::lite::Policy>(request.at("path").get<std::string>());
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return {{"ok", true}, {"seconds", seconds}, {"batch_sizes", policy_->batch_sizes()}};
  }

  tdaot::lite::Binding& binding(int64_t batch) {
    auto it = bindings_.find(batch);
    if (it == bindings_.end()) {
      it = bindings_.emplace(batch, policy_->bind(batch)).first;
      write_inputs(it->second, policy_->manifest(), batch);
    }
    return it->second;
  }

  // Times calls one by one until `iters` or, past `min_iters`, until `max_seconds` ran out.
  json run(const json& request) {
    tdaot::lite::Binding& b = binding(request.at("batch"));
    const int64_t iters = request.at("iters");
    const int64_t min_iters = request.value("min_iters", int64_t{1});
    const auto budget = std::chrono::duration<double>(request.value("max_seconds", 1e9));
    std::vector<int64_t> samples;
    samples.reserve(iters);
    const auto start = Clock::now();
    for (int64_t i = 0; i < iters; ++i) {
      const auto t0 = Clock::now();
      b.run();
      const auto t1 = Clock::now();
      samples.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
      if (i + 1 >= min_iters && t1 - start > budget) break;
    }
    std::vector<double> micros;
    micros.reserve(samples.size());
    for (const int64_t ns : samples) micros.push_back(static_cast<double>(ns) / 1e3);
    const tdaot::stats::Summary summary = tdaot::stats::summarize(std::move(micros));
    return {{"ok", true},
            {"ns", samples},
            {"summary_us",
             {{"p50", summary.p50},
              {"p99", summary.p99},
              {"p999", summary.p999},
              {"max", summary.max},
              {"mean", summary.mean}}}};
  }

  // As bench_server.cpp: the difference between N and 2N calls cancels anything done once.
  json allocations(const json& request) {
    using Count = unsigned long long (*)();
    const auto count = reinterpret_cast<Count>(dlsym(RTLD_DEFAULT, "tdaot_alloc_count"));
    if (count == nullptr) return {{"ok", true}, {"per_call", nullptr}};
    tdaot::lite::Binding& b = binding(request.at("batch"));
    const int64_t calls = request.value("calls", int64_t{200});
    const auto counted = [&](int64_t n) {
      const unsigned long long before = count();
      for (int64_t i = 0; i < n; ++i) b.run();
      return count() - before;
    };
    b.run();
    const unsigned long long once = counted(calls);
    const unsigned long long twice = counted(2 * calls);
    const double per_call = (static_cast<double>(twice) - static_cast<double>(once)) / calls;
    return {{"ok", true}, {"per_call", per_call}, {"calls", calls}};
  }

  std::unique_ptr<tdaot::lite::Policy> policy_;
  std::map<int64_t, tdaot::lite::Binding> bindings_;
};

}  // namespace

int main() {
  // Answers go to the original stdout; anything a library prints goes to stderr instead.
  FILE* answers = fdopen(dup(STDOUT_FILENO), "w");
  dup2(STDERR_FILENO, STDOUT_FILENO);

  Server server;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    json answer;
    try {
      const json request = json::parse(line);
      if (request.at("cmd") == "quit") break;
      answer = server.handle(request);
    } catch (const std::exception& e) {
      answer = {{"ok", false}, {"error", e.what()}};
    }
    const std::string text = answer.dump() + "\n";
    std::fwrite(text.data(), 1, text.size(), answers);
    std::fflush(answers);
  }
  return 0;
}
