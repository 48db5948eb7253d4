// tdaot-lite: inspect, verify, run and time a package's lite models with no libtorch (linked
// only to tdaot::lite). The lite runtime's twin of tdaot-run, for robots and for the parity
// check tdaot.testing.assert_parity(..., runtime="lite"), which runs it as a subprocess.
//
//   tdaot-lite inspect PKG
//   tdaot-lite verify PKG [--public-key K]... [--sha256 H]
//   tdaot-lite run PKG --batch B [--inputs FILE|-]   one object of key -> nested lists, or a list
//                                                     of them (a rollout: a step may hold
//                                                     "__reset__": true or one bool per row,
//                                                     applied before it); missing inputs are zeros
//                  [--sha256 H]                       H: the package file's pinned sha256
//                  [--weights W] [--public-key K]...  W (tdaot.export_weights) swapped in first,
//                                                     as lite::Policy::swap_weights checks it;
//                                                     K: trusted keys (package and weights)
//   tdaot-lite bench PKG --batch B [--iters N] [--warmup N] [--json]
//   run and bench: [--record N --record-out PATH]       the flight recorder keeps the last N
//                                                     steps (bench: of the timed runs, at most
//                                                     --iters), dumped to PATH at the end
//                                                     (docs/flight-recorder.md)
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/alloc_window.h"
#include "core/inputs_json.h"
#include "core/manifest/manifest_internal.h"
#include "tdaot/lite.h"
#include "tdaot/service/stats.h"

namespace tdaot::tool {
namespace {

using nlohmann::json;

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The nested lists of input `key` (from the inputs file `origin`) as row-major values, checked
// against `shape` (the shared reader, core/inputs_json.h, refuses ragged lists and non-numbers).
std::vector<double> flatten(const json& value, const std::vector<int64_t>& shape,
                            const std::string& key, const std::string& origin) {
  detail::NestedValues nested = detail::nested_values(value, key, origin);
  if (nested.shape != shape) {
    throw ShapeError(key, "input '" + key + "' must be nested lists of shape " +
                              format_shape(shape) + ", got " + format_shape(nested.shape));
  }
  return std::move(nested.values);
}

template <typename T>
void store(void* data, const std::vector<double>& flat) {
  T* out = static_cast<T*>(data);
  for (size_t i = 0; i < flat.size(); ++i) out[i] = static_cast<T>(flat[i]);
}

// bfloat16 is float32's upper half (rounded to nearest even; a NaN stays NaN); float16 is the
// compiler's IEEE binary16 (_Float16 on x86-64; on AArch64 __fp16, the ARM C Language Extensions'
// binary16, which GCC 12's C++ has where it lacks _Float16).
#if defined(__aarch64__)
using Half = __fp16;
#else
using Half = _Float16;
#endif

uint16_t to_bfloat16(double value) {
  const float f = static_cast<float>(value);
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

float from_bfloat16(uint16_t half) {
  const uint32_t bits = static_cast<uint32_t>(half) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

void write_input(lite::Binding& b, const TensorSpec& spec, const json& value,
                 const std::string& origin) {
  const std::vector<double> flat = flatten(value, b.input_shape(spec.key), spec.key, origin);
  void* data = b.input_data(spec.key, spec.dtype);
  switch (spec.dtype) {
    case DType::Float32: store<float>(data, flat); break;
    case DType::Float64: store<double>(data, flat); break;
    case DType::Int64: store<int64_t>(data, flat); break;
    case DType::Int32: store<int32_t>(data, flat); break;
    case DType::Int16: store<int16_t>(data, flat); break;
    case DType::Int8: store<int8_t>(data, flat); break;
    case DType::UInt8: store<uint8_t>(data, flat); break;
    case DType::Bool: store<bool>(data, flat); break;
    case DType::Float16: store<Half>(data, flat); break;
    case DType::BFloat16:
      for (size_t i = 0; i < flat.size(); ++i) static_cast<uint16_t*>(data)[i] = to_bfloat16(flat[i]);
      break;
    default:
      throw DtypeError(spec.key, "input '" + spec.key + "' has dtype " + dtype_name(spec.dtype) +
                                     ", which tdaot-lite run does not read from JSON");
  }
}

template <typename T>
json nest(const T* data, const std::vector<int64_t>& shape, size_t dim, int64_t& at) {
  if (dim == shape.size()) return json(data[at++]);
  json list = json::array();
  for (int64_t i = 0; i < shape[dim]; ++i) list.push_back(nest(data, shape, dim + 1, at));
  return list;
}

json read_output(const lite::Binding& b, const TensorSpec& spec) {
  const std::vector<int64_t> shape = b.output_shape(spec.key);
  const void* data = b.output_data(spec.key, spec.dtype);
  int64_t at = 0;
  switch (spec.dtype) {
    case DType::Float32: return nest(static_cast<const float*>(data), shape, 0, at);
    case DType::Float64: return nest(static_cast<const double*>(data), shape, 0, at);
    case DType::Int64: return nest(static_cast<const int64_t*>(data), shape, 0, at);
    case DType::Int32: return nest(static_cast<const int32_t*>(data), shape, 0, at);
    case DType::Int16: return nest(static_cast<const int16_t*>(data), shape, 0, at);
    case DType::Int8: return nest(static_cast<const int8_t*>(data), shape, 0, at);
    case DType::UInt8: return nest(static_cast<const uint8_t*>(data), shape, 0, at);
    case DType::Bool: return nest(static_cast<const bool*>(data), shape, 0, at);
    case DType::Float16:
    case DType::BFloat16: {
      std::vector<float> values(static_cast<size_t>(numel(shape)));
      for (size_t i = 0; i < values.size(); ++i) {
        values[i] = spec.dtype == DType::Float16
                        ? static_cast<float>(static_cast<const Half*>(data)[i])
                        : from_bfloat16(static_cast<const uint16_t*>(data)[i]);
      }
      return nest(values.data(), shape, 0, at);
    }
    default: return json(dtype_name(spec.dtype) + " output not printed");
  }
}

bool is_state(const Manifest& m, const std::string& key) {
  if (!m.recurrent) return false;
  for (const StatePair& pair : m.recurrent->state) {
    if (pair.input == key) return true;
  }
  return false;
}

// One step: the reset it asks for, its inputs (zeros where absent; carried state where a
// recurrent package's state is absent), the run, its outputs.
json step(lite::Binding& b, const Manifest& m, const json& inputs, const std::string& origin) {
  if (!inputs.is_object()) throw InputError("", "a step's inputs must be a JSON object of key -> nested lists");
  for (const auto& [key, value] : inputs.items()) {
    if (key == "__reset__") continue;
    if (!m.input_index(key)) {
      std::string known;
      for (const TensorSpec& s : m.inputs) known += (known.empty() ? "'" : ", '") + s.key + "'";
      throw UnknownKeyError(key, "unknown input key '" + key + "'; the package's inputs: " + known);
    }
  }
  if (auto reset = inputs.find("__reset__"); reset != inputs.end()) {
    const detail::ResetRequest request = detail::reset_request(*reset, origin);
    if (request.per_row) {
      b.reset(request.rows);
    } else if (request.all) {
      b.reset();
    }
  }
  for (const TensorSpec& spec : m.inputs) {
    auto value = inputs.find(spec.key);
    if (value != inputs.end()) {
      write_input(b, spec, *value, origin);
    } else if (!is_state(m, spec.key) && (!m.recurrent || spec.key != m.recurrent->is_init)) {
      std::memset(b.input_data(spec.key, spec.dtype), 0,
                  static_cast<size_t>(numel(b.input_shape(spec.key))) * element_size(spec.dtype));
    }
  }
  b.run();
  json out = json::object();
  for (const TensorSpec& spec : m.outputs) out[spec.key] = read_output(b, spec);
  return out;
}

json read_json(const std::string& where) {
  if (where.empty()) return json::object();
  return detail::parse_inputs_json(detail::read_inputs_text(where), where);
}

int inspect(const std::string& path) {
  const lite::Policy policy(path);
  const Manifest& m = policy.manifest();
  std::cout << "package " << path << "\n  sha256 " << policy.sha256() << "\n  built with torch "
            << m.torch_version << ", cpu_isa " << (m.cpu_isa.empty() ? "-" : m.cpu_isa)
            << (m.architecture.empty() ? "" : ", architecture " + m.architecture) << "\n";
  for (const TensorSpec& s : m.inputs) {
    std::cout << "  input  " << s.key << "  " << dtype_name(s.dtype) << " " << format_batched_shape(s.shape) << "\n";
  }
  for (const TensorSpec& s : m.outputs) {
    std::cout << "  output " << s.key << "  " << dtype_name(s.dtype) << " " << format_batched_shape(s.shape) << "\n";
  }
  std::cout << "  models:\n";
  const std::vector<lite::ModelConstants> constants = policy.constants();
  for (const ModelSpec& model : m.models) {
    std::cout << "    " << model.name << "  batch " << model.batch.min;
    if (model.batch.dynamic()) std::cout << ".." << model.batch.max;
    std::cout << "  " << model.tuning << "  " << lite_text(model);
    // A loaded lite model: whether its bindings share the library's constants or copy them.
    for (const lite::ModelConstants& c : constants) {
      if (c.model != model.name) continue;
      if (!c.in_place) {
        std::cout << "  constants copied per binding: " << c.why;
        continue;
      }
      std::cout << "  constants in place";
      for (size_t i = 0; i < c.copied.size(); ++i) {
        std::cout << (i == 0 ? " (copied per binding: " : ", ") << c.copied[i];
      }
      if (!c.copied.empty()) std::cout << ")";
    }
    std::cout << "\n";
  }
  std::cout << "  lite runtime serves batch sizes:";
  for (int64_t size : policy.batch_sizes()) std::cout << " " << size;
  std::cout << "\n";
  return 0;
}

// The flight recorder's options (--record N --record-out PATH; N 0: none).
struct Recording {
  int64_t steps = 0;
  std::string out;
};

// The binding's last steps to the --record-out file, said on stderr (stdout is the result).
void dump_recording(const lite::Binding& b, const Recording& recording) {
  if (recording.steps == 0) return;
  b.dump(recording.out);
  std::cerr << "tdaot-lite: flight log written to " << recording.out << " (a ring of "
            << b.recording() << " steps)\n";
}

int bench(const std::string& path, int64_t batch, int iters, int warmup, bool as_json,
          const Recording& recording) {
  const lite::Policy policy(path);
  lite::BindOptions options;
  // At most the timed runs, so that the warm-up's are overwritten by the time it is dumped.
  options.record = std::min<int64_t>(recording.steps, iters);
  lite::Binding b = policy.bind(batch, options);
  for (int i = 0; i < warmup; ++i) b.run();
  std::vector<double> micros(static_cast<size_t>(iters));
  const AllocWindow allocations;
  for (int i = 0; i < iters; ++i) {
    const auto start = std::chrono::steady_clock::now();
    b.run();
    micros[static_cast<size_t>(i)] =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  }
  const double per_call = allocations.done(iters);
  const stats::Summary s = stats::summarize(micros);
  if (as_json) {
    json out = {{"package", path}, {"model", b.model()}, {"batch", batch}, {"iters", iters},
                {"p50_us", s.p50}, {"p99_us", s.p99}, {"p999_us", s.p999}, {"max_us", s.max},
                {"record", options.record}};
    out["allocations_per_call"] = per_call < 0 ? json(nullptr) : json(per_call);
    std::cout << out.dump() << "\n";
  } else {
    std::cout << "lite bound run on model " << b.model() << ", batch " << batch << ": "
              << stats::format_us(s) << "\n";
    if (per_call >= 0) {
      std::cout << per_call << " allocations per call (malloc-family, whole process; preloaded counter)\n";
    }
  }
  dump_recording(b, recording);
  return 0;
}

}  // namespace
}  // namespace tdaot::tool

int main(int argc, char** argv) {
  using namespace tdaot::tool;
  CLI::App app{"tdaot-lite: run a tdaot package's lite models, no libtorch"};
  app.require_subcommand(1);
  std::string path, inputs, sha256, maps, weights;
  std::vector<std::string> keys;
  int64_t batch = 1;
  int iters = 10000, warmup = 100;
  bool as_json = false;
  Recording recording;
  // --record N --record-out PATH, on run and bench alike.
  const auto add_recording = [&recording](CLI::App* command) {
    auto* steps = command->add_option("--record", recording.steps,
                                      "keep the last N steps in the flight recorder")
                      ->check(CLI::PositiveNumber);
    auto* out = command->add_option("--record-out", recording.out, "the flight log file to write at the end");
    steps->needs(out);
    out->needs(steps);
  };
  auto* inspect_cmd = app.add_subcommand("inspect", "the manifest, and which models run lite");
  inspect_cmd->add_option("package", path)->required();
  auto* verify_cmd = app.add_subcommand("verify", "check a package without loading it");
  verify_cmd->add_option("package", path)->required();
  verify_cmd->add_option("--public-key", keys, "a trusted public key (PEM file); repeatable");
  verify_cmd->add_option("--sha256", sha256, "the expected sha256 of the package file");
  auto* run_cmd = app.add_subcommand("run", "run once (or a rollout) and print the outputs as JSON");
  run_cmd->add_option("package", path)->required();
  run_cmd->add_option("--batch", batch, "rows")->required();
  run_cmd->add_option("--inputs", inputs, "JSON file ('-': stdin); absent: zeros");
  run_cmd->add_option("--sha256", sha256,
                      "the expected sha256 of the package file: any other file is refused "
                      "before it is loaded");
  run_cmd->add_option("--weights", weights, "a weight file (tdaot.export_weights) to swap in first");
  run_cmd->add_option("--public-key", keys,
                      "a trusted public key (PEM file) for the package and the weight file; "
                      "repeatable");
  // Hidden: after the run, this process's /proc/self/maps is copied to the file, for
  // tdaot.testing.assert_parity(runtime="lite")'s check that no libtorch or c10 is mapped.
  run_cmd->add_option("--maps", maps)->group("");
  add_recording(run_cmd);
  auto* bench_cmd = app.add_subcommand("bench", "time the bound run");
  bench_cmd->add_option("package", path)->required();
  bench_cmd->add_option("--batch", batch, "rows")->required();
  bench_cmd->add_option("--iters", iters, "timed runs")->check(CLI::PositiveNumber);
  bench_cmd->add_option("--warmup", warmup, "untimed runs first")->check(CLI::NonNegativeNumber);
  bench_cmd->add_flag("--json", as_json, "one JSON line");
  add_recording(bench_cmd);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help
  } catch (const CLI::ParseError& e) {
    // A usage error exits 2, as tdaot-run's (CLI11's own codes would be 105, 106...).
    std::cerr << "tdaot-lite: " << e.what() << "\n\n" << app.help();
    return 2;
  }
  try {
    if (*inspect_cmd) return inspect(path);
    if (*verify_cmd) {
      // Verified before anything is printed: a refused package never prints "ok".
      const std::string digest = tdaot::verify_package(path, sha256, keys);
      std::cout << "ok " << digest << "\n";
      return 0;
    }
    if (*bench_cmd) return bench(path, batch, iters, warmup, as_json, recording);
    tdaot::lite::PolicyOptions options;
    options.trusted_keys = keys;
    options.expected_sha256 = sha256;
    const tdaot::lite::Policy policy(path, options);
    if (!weights.empty()) policy.swap_weights(weights);
    tdaot::lite::BindOptions bind_options;
    bind_options.record = recording.steps;
    tdaot::lite::Binding b = policy.bind(batch, bind_options);
    const nlohmann::json given = read_json(inputs);
    if (given.is_array()) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& s : given) out.push_back(step(b, policy.manifest(), s, inputs));
      std::cout << out.dump() << "\n";
    } else {
      std::cout << step(b, policy.manifest(), given, inputs).dump() << "\n";
    }
    dump_recording(b, recording);
    if (!maps.empty()) {
      std::ifstream self("/proc/self/maps");
      std::ofstream out(maps);
      if (!(out << self.rdbuf())) throw tdaot::Error("cannot write /proc/self/maps to '" + maps + "'");
    }
    return 0;
  } catch (const tdaot::Error& e) {
    std::cerr << "tdaot-lite: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    // Not a tdaot error (a bug: each input should be refused as one): still one line, exit 1.
    std::cerr << "tdaot-lite: internal error: " << e.what() << "\n";
    return 1;
  }
}
