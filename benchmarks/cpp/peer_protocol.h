// The JSON line protocol of the bench servers (bench_server.cpp, lite_server.cpp and the peers'
// openvino_server.cpp, executorch_server.cpp): a server is a `Peer` with load(request) -> the
// batch sizes it serves (null: all), and call(batch) (inputs made once per batch); the loop,
// timing and allocation counts are here, once.
//   {"cmd": "load", "path": P, "inputs": [{"dtype", "shape"}...], "batches": [B...]}
//                                     -> seconds, "batch_sizes" (what this peer serves)
//   {"cmd": "first", "batch": B} / {"cmd": "run", ...} / {"cmd": "allocs", ...} / {"cmd": "memory"}
//   {"cmd": "quit"}
// With arguments, `SERVER PATH STEPS INPUTS_JSON` loads PATH, prints a line after the first call
// at batch 1 and makes STEPS calls in all: benchmarks/footprint.py's maxrss and start-up rows.
#pragma once

#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tdaot/service/stats.h"

namespace bench {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct InputSpec {
  std::string dtype;
  std::vector<int64_t> shape;  // without the batch dim
};

inline std::vector<InputSpec> input_specs(const json& request) {
  std::vector<InputSpec> specs;
  for (const json& spec : request.at("inputs")) specs.push_back({spec.at("dtype"), spec.at("shape")});
  return specs;
}

// The same kinds of values as lite_server.cpp's (normal floats, full-range bytes, false flags),
// from a std::mt19937 seeded with the batch size.
inline void fill(const std::string& dtype, void* data, int64_t count, std::mt19937& gen) {
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> byte(0, 255), small(0, 9);
  if (dtype == "float32") {
    for (int64_t i = 0; i < count; ++i) static_cast<float*>(data)[i] = normal(gen);
  } else if (dtype == "uint8") {
    for (int64_t i = 0; i < count; ++i) static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(byte(gen));
  } else if (dtype == "int64") {
    for (int64_t i = 0; i < count; ++i) static_cast<int64_t*>(data)[i] = small(gen);
  } else if (dtype == "bool") {
    std::memset(data, 0, static_cast<size_t>(count));
  } else {
    throw std::runtime_error("no peer input of dtype " + dtype);
  }
}

inline json memory() {
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

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Times calls one by one until `iters` or, past `min_iters`, until `max_seconds` ran out.
template <typename Call>
json timed_run(Call&& call, const json& request) {
  const int64_t iters = request.at("iters");
  const int64_t min_iters = request.value("min_iters", int64_t{1});
  const auto budget = std::chrono::duration<double>(request.value("max_seconds", 1e9));
  std::vector<int64_t> samples;
  samples.reserve(iters);
  const auto start = Clock::now();
  for (int64_t i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    call();
    const auto t1 = Clock::now();
    samples.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
    if (i + 1 >= min_iters && t1 - start > budget) break;
  }
  std::vector<double> micros(samples.begin(), samples.end());
  for (double& us : micros) us /= 1e3;
  const tdaot::stats::Summary s = tdaot::stats::summarize(std::move(micros));
  return {{"ok", true},
          {"ns", samples},
          {"summary_us", {{"p50", s.p50}, {"p99", s.p99}, {"p999", s.p999}, {"max", s.max}, {"mean", s.mean}}}};
}

// As bench_server.cpp: the difference between N and 2N calls cancels anything done once.
template <typename Call>
json allocations(Call&& call, const json& request) {
  using Count = unsigned long long (*)();
  const auto count = reinterpret_cast<Count>(dlsym(RTLD_DEFAULT, "tdaot_alloc_count"));
  if (count == nullptr) return {{"ok", true}, {"per_call", nullptr}};
  const int64_t calls = request.value("calls", int64_t{200});
  const auto counted = [&](int64_t n) {
    const unsigned long long before = count();
    for (int64_t i = 0; i < n; ++i) call();
    return count() - before;
  };
  call();
  const unsigned long long once = counted(calls);
  const unsigned long long twice = counted(2 * calls);
  return {{"ok", true}, {"per_call", (static_cast<double>(twice) - static_cast<double>(once)) / calls},
          {"calls", calls}};
}

template <typename Peer>
json handle(Peer& peer, bool& loaded, const json& request) {
  const std::string cmd = request.at("cmd");
  if (cmd == "memory") return memory();
  if (cmd == "load") {
    const auto t0 = Clock::now();
    json served = peer.load(request);  // null: every batch
    loaded = true;
    json answer = {{"ok", true}, {"seconds", seconds_since(t0)}};
    if (!served.is_null()) answer["batch_sizes"] = served;
    return answer;
  }
  if (!loaded) throw std::runtime_error("no model loaded");
  const int64_t batch = request.at("batch");
  const auto call = [&] { peer.call(batch); };
  if (cmd == "first") {
    const auto t0 = Clock::now();
    call();
    return {{"ok", true}, {"seconds", seconds_since(t0)}};
  }
  if (cmd == "run") return timed_run(call, request);
  if (cmd == "allocs") return allocations(call, request);
  throw std::runtime_error("unknown command " + cmd);
}

template <typename Peer>
int footprint(Peer& peer, char** argv) {
  const json request = {{"path", argv[1]}, {"inputs", json::parse(argv[3])}, {"batches", {1}}};
  peer.load(request);
  peer.call(1);
  std::printf("first output\n");
  std::fflush(stdout);
  for (long i = 1; i < std::stol(argv[2]); ++i) peer.call(1);
  return 0;
}

template <typename Peer>
int serve(Peer& peer, int argc, char** argv) {
  if (argc == 4) return footprint(peer, argv);
  // Answers go to the original stdout; anything a library prints goes to stderr instead.
  FILE* answers = fdopen(dup(STDOUT_FILENO), "w");
  dup2(STDERR_FILENO, STDOUT_FILENO);
  bool loaded = false;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    json answer;
    try {
      const json request = json::parse(line);
      if (request.at("cmd") == "quit") break;
      answer = handle(peer, loaded, request);
    } catch (const std::exception& e) {
      answer = {{"ok", false}, {"error", e.what()}};
    }
    const std::string text = answer.dump() + "\n";
    std::fwrite(text.data(), 1, text.size(), answers);
    std::fflush(answers);
  }
  return 0;
}

}  // namespace bench
