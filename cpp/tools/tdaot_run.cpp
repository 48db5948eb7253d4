// tdaot-run: inspect, smoke-run and benchmark a tdaot package from the command line.
//
//   tdaot-run inspect PKG [--json]
//   tdaot-run verify PKG [--sha256 HEX]
//   tdaot-run run PKG [--batch B] [--random] [--seed S] [--inputs FILE.json] [--op-lib LIB]...
//   tdaot-run bench PKG [--batch B] [--iters N] [--warmup W] [--threads T] [--runners R]
//                       [--callers C] [--json] [--op-lib LIB]...
//   tdaot-run soak PKG [--calls N] [--batch B] [--samples S] [--warmup-calls W]
//                      [--max-growth-kib K] [--session] [--seed S] [--json] [--op-lib LIB]...
//
// soak makes N calls (default 1,000,000) on fixed random inputs, Session::step_positional for
// a recurrent package (or with --session), else run_positional, and reads the resident set
// (/proc/self/statm) at S + 1 evenly spaced calls and at the end of the warm-up (the first W
// calls, default N / 10). It prints the RSS at the start, the end of the warm-up, its max after
// it and at the end, the growth from the end of the warm-up to the end, and latency
// percentiles of the calls after the warm-up; it fails when the growth exceeds K KiB (1024).
//
// --op-lib loads a shared library registering custom operators the package calls (the
// manifest's custom_ops, shown by inspect) before the package; repeat it for several.
// run, bench and soak also take --sha256 HEX (refuse any other package: pinning) and
// --temp-dir DIR (where the package is extracted while it loads). verify checks the sha256
// digests of every file (and --sha256) without loading the package, and prints its sha256.
//
// An inputs file is a JSON object mapping manifest keys to nested arrays, batch dim first:
//   {"observation": [[0.1, 0.2, 0.3], [0.0, 1.0, -1.0]], "is_init": [[true], [false]]}
// Values are numbers (or true/false), converted to the manifest's dtype; integers are exact up
// to 2^53. Every input must be given; keys, shapes and batch sizes are checked like any run.
//
// Exit codes: 0 success, 1 a tdaot error (message on stderr), 2 bad usage, 3 a soak whose RSS
// grew by more than --max-growth-kib.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tdaot/policy.h"
#include "tdaot/session.h"

namespace {

struct Options {
  std::string package;
  int64_t batch = -1;  // unset: the package's smallest batch
  bool random = false;
  uint64_t seed = 0;
  int iters = 1000;
  int warmup = 100;
  int threads = 1;
  int runners = 1;
  int callers = 1;
  std::string inputs_file;
  bool json = false;
  std::vector<std::string> op_libraries;
  std::string expected_sha256;
  std::string temp_dir;
  // soak
  int64_t calls = 1000000;
  int samples = 100;
  int64_t warmup_calls = -1;  // unset: calls / 10
  int64_t max_growth_kib = 1024;
  bool session = false;
};

constexpr int kSoakFailed = 3;

using nlohmann::json;

[[noreturn]] void inputs_file_error(const std::string& path, const std::string& problem) {
  throw tdaot::Error("inputs file '" + path + "': " + problem);
}

// The shape of a nested JSON array, read along its first elements; `fill` checks the rest.
std::vector<int64_t> nested_shape(const json& value) {
  std::vector<int64_t> shape;
  for (const json* level = &value; level->is_array(); level = &level->front()) {
    shape.push_back(static_cast<int64_t>(level->size()));
    if (level->empty()) break;
  }
  return shape;
}

// Appends the scalars of `value` (at `where`, `depth` dims down) to `flat`, refusing ragged
// arrays and non-numbers.
void fill(const json& value, const std::vector<int64_t>& shape, size_t depth,
          const std::string& where, const std::string& path, std::vector<double>& flat) {
  if (depth == shape.size()) {
    if (value.is_boolean()) {
      flat.push_back(value.get<bool>() ? 1.0 : 0.0);
    } else if (value.is_number()) {
      flat.push_back(value.get<double>());
    } else {
      inputs_file_error(path, where + " is " + value.dump() + ", expected a number or a bool");
    }
    return;
  }
  if (!value.is_array() || static_cast<int64_t>(value.size()) != shape[depth]) {
    inputs_file_error(path, where + " is " +
                                (value.is_array() ? "an array of " + std::to_string(value.size())
                                                  : value.dump()) +
                                ", expected an array of " + std::to_string(shape[depth]) +
                                " (the array is not rectangular)");
  }
  for (size_t i = 0; i < value.size(); ++i) {
    fill(value[i], shape, depth + 1, where + "[" + std::to_string(i) + "]", path, flat);
  }
}

// Inputs keyed by manifest key from a JSON inputs file (see the header comment). Keys the
// manifest lacks are kept (as float32) so that Policy::run reports them like any unknown key.
tdaot::TensorMap read_inputs_file(const std::string& path, const tdaot::Manifest& manifest) {
  std::ifstream file(path);
  if (!file) inputs_file_error(path, "cannot be read");
  json root;
  try {
    root = json::parse(file);
  } catch (const json::parse_error& e) {
    inputs_file_error(path, std::string("invalid JSON: ") + e.what());
  }
  if (!root.is_object()) {
    inputs_file_error(path,
                      std::string("expected a JSON object of arrays, got ") + root.type_name());
  }
  tdaot::TensorMap inputs;
  for (const auto& [key, value] : root.items()) {
    const std::vector<int64_t> shape = nested_shape(value);
    std::vector<double> flat;
    fill(value, shape, 0, "'" + key + "'", path, flat);
    const auto index = manifest.input_index(key);
    const auto dtype = index ? manifest.inputs[*index].dtype : at::kFloat;
    const at::Tensor values = at::tensor(flat, at::TensorOptions().dtype(at::kDouble));
    inputs.emplace(key, values.view(shape).to(dtype).to(at::Device(manifest.device)));
  }
  return inputs;
}

// The requested batch size, else the smallest the package accepts.
int64_t batch_size(const Options& options, const tdaot::Manifest& manifest) {
  return options.batch >= 0 ? options.batch : manifest.batch.min;
}

std::vector<int64_t> batched(int64_t batch, const std::vector<int64_t>& shape) {
  std::vector<int64_t> out{batch};
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
}

// One tensor per spec: zeros, or seeded random values suited to the dtype.
std::vector<at::Tensor> make_tensors(const std::vector<tdaot::TensorSpec>& specs,
                                     const std::string& device, int64_t batch, bool random,
                                     uint64_t seed) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<at::Tensor> inputs;
  for (const auto& spec : specs) {
    const auto shape = batched(batch, spec.shape);
    const auto options = at::TensorOptions().dtype(spec.dtype);
    at::Tensor tensor;
    if (!random) {
      tensor = at::zeros(shape, options);
    } else if (spec.dtype == at::kBool) {
      tensor = at::randint(0, 2, shape, generator, options);
    } else if (c10::isIntegralType(spec.dtype, /*includeBool=*/false)) {
      tensor = at::randint(0, 10, shape, generator, options);
    } else {
      tensor = at::randn(shape, generator, options);
    }
    inputs.push_back(tensor.to(at::Device(device)));
  }
  return inputs;
}

// One tensor per manifest input.
std::vector<at::Tensor> make_inputs(const tdaot::Manifest& manifest, int64_t batch, bool random,
                                    uint64_t seed) {
  return make_tensors(manifest.inputs, manifest.device, batch, random, seed);
}

// "[0.12, -3.4, ...]": the first `limit` values of a tensor, flattened.
std::string first_values(const at::Tensor& tensor, int64_t limit = 8) {
  const at::Tensor flat = tensor.detach().to(at::kCPU).flatten();
  const int64_t n = std::min<int64_t>(limit, flat.numel());
  const bool integral = c10::isIntegralType(flat.scalar_type(), /*includeBool=*/true);
  const at::Tensor head = flat.slice(0, 0, n).to(integral ? at::kLong : at::kDouble);
  std::ostringstream out;
  out << "[";
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0) out << ", ";
    if (integral) {
      out << head[i].item<int64_t>();
    } else {
      out << head[i].item<double>();
    }
  }
  if (flat.numel() > n) out << ", ...";
  out << "]";
  return out.str();
}

size_t key_width(const std::vector<tdaot::TensorSpec>& specs) {
  size_t width = 0;
  for (const auto& spec : specs) width = std::max(width, spec.key.size());
  return width;
}

void print_specs(const char* title, const std::vector<tdaot::TensorSpec>& specs) {
  std::cout << title << "\n";
  const int width = static_cast<int>(key_width(specs));
  for (const auto& spec : specs) {
    std::cout << "  " << std::left << std::setw(width) << spec.key << "  " << std::setw(8)
              << tdaot::dtype_name(spec.dtype) << "  " << tdaot::format_batched_shape(spec.shape)
              << "\n";
  }
}

// The options every loading command shares (--op-lib, --sha256, --temp-dir).
tdaot::PolicyOptions load_options(const Options& options) {
  tdaot::PolicyOptions load;
  load.op_libraries = options.op_libraries;
  load.expected_sha256 = options.expected_sha256;
  load.temp_dir = options.temp_dir;
  return load;
}

int verify(const Options& options) {
  const std::string sha256 = tdaot::verify_package(options.package, options.expected_sha256);
  const tdaot::Manifest m = tdaot::read_manifest(options.package);
  std::cout << options.package << ": " << m.files.size() << " files match their sha256 digests"
            << (options.expected_sha256.empty() ? "" : "; the package matches --sha256") << "\n"
            << "sha256 " << sha256 << "\n";
  return 0;
}

int inspect(const Options& options) {
  const tdaot::Manifest m = tdaot::read_manifest(options.package);
  if (options.json) {
    std::cout << m.to_json(2) << "\n";
    return 0;
  }
  const auto row = [](const char* name, const std::string& value) {
    std::cout << std::left << std::setw(14) << name << value << "\n";
  };
  row("package", options.package);
  row("schema", std::to_string(m.schema_version));
  row("device", m.device);
  row("cpu target", m.cpu_target + " (isa " + m.cpu_isa + ")");
  row("batch", std::to_string(m.batch.min) + ".." + std::to_string(m.batch.max) +
                   (m.batch.dynamic() ? " (dynamic)" : " (static)"));
  row("interaction", m.interaction_type);
  row("built with", "torch " + m.torch_version + ", tensordict " + m.tensordict_version +
                        ", tdaot " + m.tdaot_version);
  row("source",
      m.source.module_class + (m.source.factory.empty() ? "" : " from " + m.source.factory));
  row("files", std::to_string(m.files.size()) + " with sha256 digests (checked at load; verify)");
  if (!m.custom_ops.empty()) {
    std::string ops;
    for (const auto& op : m.custom_ops) ops += (ops.empty() ? "" : ", ") + op;
    row("custom ops", ops + " (load with --op-lib)");
  }
  if (m.recurrent) {
    std::string state;
    for (const auto& pair : m.recurrent->state) {
      state += (state.empty() ? "" : ", ") + pair.input + " <- " + pair.output;
    }
    row("recurrent",
        state + (m.recurrent->is_init.empty() ? "" : "; is_init " + m.recurrent->is_init));
  }
  print_specs("inputs", m.inputs);
  print_specs("outputs", m.outputs);
  return 0;
}

int run_once(const Options& options) {
  tdaot::PolicyOptions load = load_options(options);
  const tdaot::Policy policy(options.package, load);
  const tdaot::Manifest& m = policy.manifest();
  std::vector<at::Tensor> outputs;
  std::string source;
  int64_t batch = 0;
  if (!options.inputs_file.empty()) {
    const tdaot::TensorMap out = policy.run(read_inputs_file(options.inputs_file, m));
    for (const auto& spec : m.outputs) outputs.push_back(out.at(spec.key));
    batch = outputs.empty() ? 0 : outputs.front().size(0);
    source = "inputs from " + options.inputs_file;
  } else {
    batch = batch_size(options, m);
    outputs = policy.run_positional(make_inputs(m, batch, options.random, options.seed));
    source = options.random ? "random inputs (seed " + std::to_string(options.seed) + ")"
                            : std::string("zeros");
  }
  std::cout << "ran " << options.package << " with batch " << batch << " of " << source << "\n";
  const int width = static_cast<int>(key_width(m.outputs));
  for (size_t i = 0; i < outputs.size(); ++i) {
    std::cout << "  " << std::left << std::setw(width) << m.outputs[i].key << "  " << std::setw(8)
              << tdaot::dtype_name(outputs[i].scalar_type()) << "  " << std::setw(12)
              << tdaot::format_shape(outputs[i].sizes().vec()) << "  " << first_values(outputs[i])
              << "\n";
  }
  return 0;
}

// Nearest-rank percentile of sorted samples.
double percentile(const std::vector<double>& sorted, double p) {
  const auto rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

int bench(const Options& options) {
  tdaot::PolicyOptions load = load_options(options);
  load.intra_op_threads = options.threads;
  load.num_runners = options.runners;
  load.warmup_runs = 0;  // the bench does its own, timed separately
  const tdaot::Policy policy(options.package, load);
  const int64_t batch = batch_size(options, policy.manifest());
  const auto inputs = make_inputs(policy.manifest(), batch, /*random=*/true, options.seed);
  for (int i = 0; i < options.warmup; ++i) policy.run_positional(inputs);

  // Each caller thread times its own calls; percentiles are over all of them.
  using Clock = std::chrono::steady_clock;
  std::vector<std::vector<double>> per_caller(options.callers, std::vector<double>(options.iters));
  const auto start = Clock::now();
  std::vector<std::thread> callers;
  for (auto& micros : per_caller) {
    callers.emplace_back([&policy, &inputs, &micros] {
      for (double& sample : micros) {
        const auto t0 = Clock::now();
        policy.run_positional(inputs);
        sample = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      }
    });
  }
  for (auto& caller : callers) caller.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> micros;
  for (const auto& samples : per_caller)
    micros.insert(micros.end(), samples.begin(), samples.end());
  std::sort(micros.begin(), micros.end());
  const double calls_per_s = static_cast<double>(micros.size()) / seconds;

  if (options.json) {
    nlohmann::ordered_json out = {{"package", options.package},
                                  {"batch", batch},
                                  {"iters", options.iters},
                                  {"warmup", options.warmup},
                                  {"threads", options.threads},
                                  {"runners", options.runners},
                                  {"callers", options.callers},
                                  {"p50_us", percentile(micros, 0.5)},
                                  {"p99_us", percentile(micros, 0.99)},
                                  {"p999_us", percentile(micros, 0.999)},
                                  {"max_us", micros.back()},
                                  {"calls_per_s", calls_per_s}};
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << options.package << ": batch " << batch << ", " << options.threads
            << " intra-op thread(s), " << options.runners << " runner(s), " << options.callers
            << " caller(s) x " << options.iters << " iters after " << options.warmup << " warmup\n"
            << std::fixed << std::setprecision(1) << "  p50 " << percentile(micros, 0.5)
            << " us  p99 " << percentile(micros, 0.99) << " us  p99.9 " << percentile(micros, 0.999)
            << " us  max " << micros.back() << " us\n"
            << std::setprecision(0) << "  " << calls_per_s << " calls/s\n";
  return 0;
}

// Call latencies in nanoseconds, in buckets 1/64 of a power of two wide (exact below 128 ns):
// constant memory however many calls a soak makes, so its own bookkeeping does not grow the
// RSS it measures, and percentiles within 1.6 %.
class LatencyHistogram {
 public:
  LatencyHistogram() : counts_(kBuckets, 0) {}

  void add(uint64_t ns) {
    ++counts_[index(ns)];
    ++count_;
    sum_ += ns;
    max_ = std::max(max_, ns);
  }
  uint64_t count() const { return count_; }
  double max_us() const { return static_cast<double>(max_) / 1e3; }
  double mean_us() const { return count_ ? static_cast<double>(sum_) / count_ / 1e3 : 0.0; }
  // Nearest-rank percentile: the middle of its bucket (at most the max), in microseconds.
  double percentile_us(double p) const {
    if (count_ == 0) return 0.0;
    const auto rank = std::clamp<uint64_t>(
        static_cast<uint64_t>(std::ceil(p * static_cast<double>(count_))), 1, count_);
    uint64_t seen = 0;
    for (size_t i = 0; i < counts_.size(); ++i) {
      seen += counts_[i];
      if (seen >= rank) return std::min(middle(i), static_cast<double>(max_)) / 1e3;
    }
    return max_us();
  }

 private:
  static constexpr size_t kExact = 128;
  static constexpr size_t kBuckets = kExact + (64 - 7) * 64;
  static size_t index(uint64_t ns) {
    if (ns < kExact) return ns;
    const int exponent = 63 - __builtin_clzll(ns);  // 7..63: ns >> (exponent - 6) is 64..127
    return kExact + (exponent - 7) * 64 + ((ns >> (exponent - 6)) - 64);
  }
  static double middle(size_t i) {
    if (i < kExact) return static_cast<double>(i);
    const size_t exponent = (i - kExact) / 64 + 7;
    const size_t sub = (i - kExact) % 64 + 64;
    return (static_cast<double>(sub) + 0.5) * std::ldexp(1.0, static_cast<int>(exponent) - 6);
  }
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  uint64_t sum_ = 0;
  uint64_t max_ = 0;
};

// The process's resident set now, its file-backed part (mapped libraries), and the bytes the
// program holds from malloc (glibc's count, -1 elsewhere), in KiB. RSS growing while the heap in
// use does not is the allocator keeping freed memory, not a leak.
struct Rss {
  int64_t resident_kib = 0;
  int64_t file_kib = 0;
  int64_t heap_kib = -1;
};

int64_t heap_in_use_kib() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
  const struct mallinfo2 info = ::mallinfo2();
  return static_cast<int64_t>((info.uordblks + info.hblkhd) / 1024);
#else
  return -1;
#endif
}

Rss current_rss() {
  // statm: size resident shared text lib data dt, in pages. Read with open/read: no allocation.
  const int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  char text[256];
  const ssize_t n = fd < 0 ? -1 : ::read(fd, text, sizeof(text) - 1);
  if (fd >= 0) ::close(fd);
  long long size = 0, resident = 0, shared = 0;
  if (n <= 0 ||
      (text[n] = '\0', std::sscanf(text, "%lld %lld %lld", &size, &resident, &shared) != 3)) {
    throw tdaot::Error("soak: cannot read the resident set from /proc/self/statm");
  }
  static const int64_t page_kib = ::sysconf(_SC_PAGESIZE) / 1024;
  return {resident * page_kib, shared * page_kib, heap_in_use_kib()};
}

struct RssSample {
  int64_t call;  // calls made before the sample
  double seconds;
  Rss rss;
};

// Runs `calls` calls on fixed random inputs (run_positional, or Session::step_positional for a
// recurrent package), reading the RSS at evenly spaced calls; fails (exit 3) when it grew by
// more than --max-growth-kib between the end of the warm-up and the end.
int soak(const Options& options) {
  tdaot::PolicyOptions load = load_options(options);
  const tdaot::Policy policy(options.package, load);
  const tdaot::Manifest& m = policy.manifest();
  const int64_t batch = batch_size(options, m);
  std::optional<tdaot::Session> session;
  if (options.session || m.recurrent) session.emplace(policy, batch);
  const auto inputs = session ? make_tensors(session->inputs(), m.device, batch, true, options.seed)
                              : make_inputs(m, batch, /*random=*/true, options.seed);
  const int64_t calls = options.calls;
  const int64_t warmup = options.warmup_calls >= 0 ? options.warmup_calls : calls / 10;

  // Where to read the RSS: calls * k / samples for k = 0..samples, and the end of the warm-up.
  std::vector<int64_t> points{warmup};
  for (int k = 0; k <= options.samples; ++k) points.push_back(calls * k / options.samples);
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  std::vector<RssSample> samples;
  samples.reserve(points.size());
  LatencyHistogram latency;

  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto take_sample = [&](int64_t call) {
    samples.push_back(
        {call, std::chrono::duration<double>(Clock::now() - start).count(), current_rss()});
  };
  size_t next = 0;
  for (int64_t call = 0; call < calls; ++call) {
    if (call == points[next]) {
      take_sample(call);
      ++next;
    }
    const auto t0 = Clock::now();
    if (session) {
      session->step_positional(inputs);
    } else {
      policy.run_positional(inputs);
    }
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0);
    if (call >= warmup) latency.add(static_cast<uint64_t>(ns.count()));
  }
  take_sample(calls);
  const double seconds = samples.back().seconds;

  const auto at_warmup = std::find_if(samples.begin(), samples.end(),
                                      [&](const RssSample& s) { return s.call == warmup; });
  const RssSample& warm = *at_warmup;
  const RssSample& last = samples.back();
  const auto peak =
      std::max_element(at_warmup, samples.end(), [](const RssSample& a, const RssSample& b) {
        return a.rss.resident_kib < b.rss.resident_kib;
      });
  const int64_t growth = last.rss.resident_kib - warm.rss.resident_kib;
  const int64_t file_growth = last.rss.file_kib - warm.rss.file_kib;
  const bool heap_known = last.rss.heap_kib >= 0;
  const int64_t heap_growth = last.rss.heap_kib - warm.rss.heap_kib;
  const bool passed = growth <= options.max_growth_kib;
  // Least-squares slope of the RSS over the samples after the warm-up: a leak is a trend, a
  // one-off allocation (a cache filled late) is a step.
  double slope = 0.0;
  {
    double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (auto it = at_warmup; it != samples.end(); ++it) {
      const double x = static_cast<double>(it->call) / 1e6;
      const double y = static_cast<double>(it->rss.resident_kib);
      n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
    }
    const double denominator = n * sxx - sx * sx;
    if (n >= 2 && denominator > 0) slope = (n * sxy - sx * sy) / denominator;
  }
  const double calls_per_s = static_cast<double>(calls) / seconds;
  const char* mode = session ? "session" : "run_positional";

  if (options.json) {
    nlohmann::ordered_json rss_curve = json::array();
    for (const auto& s : samples) {
      rss_curve.push_back({{"call", s.call},
                           {"seconds", s.seconds},
                           {"rss_kib", s.rss.resident_kib},
                           {"file_kib", s.rss.file_kib},
                           {"heap_kib", heap_known ? json(s.rss.heap_kib) : json(nullptr)}});
    }
    nlohmann::ordered_json out = {
        {"package", options.package},
        {"mode", mode},
        {"batch", batch},
        {"calls", calls},
        {"warmup_calls", warmup},
        {"seconds", seconds},
        {"calls_per_s", calls_per_s},
        {"rss_start_kib", samples.front().rss.resident_kib},
        {"rss_warmup_kib", warm.rss.resident_kib},
        {"rss_max_kib", peak->rss.resident_kib},
        {"rss_final_kib", last.rss.resident_kib},
        {"growth_kib", growth},
        {"file_growth_kib", file_growth},
        {"heap_growth_kib", heap_known ? json(heap_growth) : json(nullptr)},
        {"slope_kib_per_million_calls", slope},
        {"max_growth_kib", options.max_growth_kib},
        {"passed", passed},
        {"latency_us",
         {{"p50", latency.percentile_us(0.5)},
          {"p99", latency.percentile_us(0.99)},
          {"p999", latency.percentile_us(0.999)},
          {"max", latency.max_us()},
          {"mean", latency.mean_us()}}},
        {"samples", rss_curve}};
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << options.package << ": soak of " << calls << " calls (" << mode << ", batch "
              << batch << "), the first " << warmup << " warm-up\n"
              << "  RSS KiB  start " << samples.front().rss.resident_kib << "  warm-up "
              << warm.rss.resident_kib << "  max " << peak->rss.resident_kib << "  final "
              << last.rss.resident_kib << "  (" << samples.size() << " samples)\n"
              << "  growth after warm-up " << growth << " KiB (file-backed " << file_growth
              << " KiB"
              << (heap_known ? ", malloc heap in use " + std::to_string(heap_growth) + " KiB" : "")
              << "), limit " << options.max_growth_kib << " KiB: " << (passed ? "ok" : "FAILED")
              << "\n"
              << std::fixed << std::setprecision(1) << "  latency after warm-up  p50 "
              << latency.percentile_us(0.5) << " us  p99 " << latency.percentile_us(0.99)
              << " us  p99.9 " << latency.percentile_us(0.999) << " us  max " << latency.max_us()
              << " us\n"
              << std::setprecision(2) << "  " << seconds << " s, " << std::setprecision(0)
              << calls_per_s << " calls/s\n";
  }
  if (!passed) {
    std::cerr << "tdaot-run: soak failed: the RSS grew by " << growth << " KiB after warm-up ("
              << warm.rss.resident_kib << " KiB at call " << warm.call << ", "
              << last.rss.resident_kib << " KiB at call " << last.call
              << "), more than --max-growth-kib " << options.max_growth_kib << "\n";
    return kSoakFailed;
  }
  return 0;
}

CLI::App* add_command(CLI::App& app, const char* name, const char* description, Options& options) {
  CLI::App* command = app.add_subcommand(name, description);
  command->add_option("package", options.package, "path to a .pt2 package built by tdaot")
      ->required();
  return command;
}

void add_sha256(CLI::App* command, Options& options) {
  command->add_option("--sha256", options.expected_sha256,
                      "refuse any package whose sha256 is not this one "
                      "(PolicyOptions::expected_sha256)");
}

void add_load_options(CLI::App* command, Options& options) {
  command->add_option("--op-lib", options.op_libraries,
                      "shared library registering custom operators the package calls "
                      "(repeatable; PolicyOptions::op_libraries)");
  add_sha256(command, options);
  command->add_option("--temp-dir", options.temp_dir,
                      "where the package is extracted while loading (default $TMPDIR or /tmp; "
                      "PolicyOptions::temp_dir)");
}

void add_batch(CLI::App* command, Options& options) {
  command->add_option("--batch", options.batch, "batch size (default: the package's smallest)")
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()));
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"Inspect, run and benchmark tdaot packages (.pt2).", "tdaot-run"};
  app.require_subcommand(1);

  CLI::App* inspect_cmd = add_command(app, "inspect", "print the package's manifest", options);
  inspect_cmd->add_flag("--json", options.json, "print the manifest as JSON");

  CLI::App* verify_cmd = add_command(
      app, "verify", "check every file against the manifest's sha256 digests, load nothing",
      options);
  add_sha256(verify_cmd, options);

  CLI::App* run_cmd =
      add_command(app, "run", "run once on zero (or random) inputs and print outputs", options);
  add_batch(run_cmd, options);
  add_load_options(run_cmd, options);
  run_cmd->add_flag("--random", options.random, "random inputs instead of zeros");
  run_cmd->add_option("--seed", options.seed, "seed for --random")->capture_default_str();
  run_cmd
      ->add_option("--inputs", options.inputs_file,
                   "JSON file mapping input keys to nested arrays (batch first)")
      ->excludes("--random")
      ->excludes("--batch");

  CLI::App* bench_cmd = add_command(app, "bench", "time run_positional on fixed inputs", options);
  add_batch(bench_cmd, options);
  add_load_options(bench_cmd, options);
  const auto at_least = [](int min) { return CLI::Range(min, std::numeric_limits<int>::max()); };
  bench_cmd->add_option("--iters", options.iters, "timed calls")
      ->check(at_least(1))
      ->capture_default_str();
  bench_cmd->add_option("--warmup", options.warmup, "untimed calls first")
      ->check(at_least(0))
      ->capture_default_str();
  bench_cmd
      ->add_option("--threads", options.threads,
                   "intra-op threads for ATen ops (PolicyOptions::intra_op_threads)")
      ->check(at_least(1))
      ->capture_default_str();
  bench_cmd
      ->add_option("--runners", options.runners,
                   "model instances for concurrent calls (PolicyOptions::num_runners)")
      ->check(at_least(1))
      ->capture_default_str();
  bench_cmd->add_option("--callers", options.callers, "threads calling run concurrently")
      ->check(at_least(1))
      ->capture_default_str();
  bench_cmd->add_flag("--json", options.json, "print the results as JSON");

  CLI::App* soak_cmd = add_command(
      app, "soak", "many calls on fixed inputs with the RSS sampled: fails if it keeps growing",
      options);
  add_batch(soak_cmd, options);
  add_load_options(soak_cmd, options);
  const auto positive = CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max());
  const auto non_negative = CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max());
  soak_cmd->add_option("--calls", options.calls, "calls in all, warm-up included")
      ->check(positive)
      ->capture_default_str();
  soak_cmd->add_option("--samples", options.samples, "RSS readings at evenly spaced calls (+1)")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  soak_cmd
      ->add_option("--warmup-calls", options.warmup_calls,
                   "calls before the RSS baseline (default: a tenth of --calls)")
      ->check(non_negative);
  soak_cmd
      ->add_option("--max-growth-kib", options.max_growth_kib,
                   "fail (exit 3) when the RSS grows by more after the warm-up")
      ->check(non_negative)
      ->capture_default_str();
  soak_cmd->add_flag("--session", options.session,
                     "step a tdaot::Session (the default for a recurrent package)");
  soak_cmd->add_option("--seed", options.seed, "seed of the random inputs")->capture_default_str();
  soak_cmd->add_flag("--json", options.json, "print the results (and the RSS curve) as JSON");

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help
  } catch (const CLI::ParseError& e) {
    std::cerr << "tdaot-run: " << e.what() << "\n\n" << app.help();
    return 2;
  }
  if (*soak_cmd && options.warmup_calls >= options.calls) {
    std::cerr << "tdaot-run: --warmup-calls " << options.warmup_calls
              << " leaves no calls to measure: it must be less than --calls " << options.calls
              << "\n";
    return 2;
  }

  try {
    if (*inspect_cmd) return inspect(options);
    if (*verify_cmd) return verify(options);
    if (*run_cmd) return run_once(options);
    if (*soak_cmd) return soak(options);
    return bench(options);
  } catch (const tdaot::Error& e) {
    std::cerr << "tdaot-run: " << e.what() << "\n";
    return 1;
  }
}
