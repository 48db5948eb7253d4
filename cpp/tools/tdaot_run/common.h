// tdaot-run's shared core: exit codes, the subcommand interface, the flags several subcommands
// take, and inputs made from a manifest. One file per subcommand (inspect.cpp, verify.cpp,
// run.cpp, bench.cpp, soak.cpp) adds itself to the command line through its add_* function.
#pragma once

#include <ATen/Tensor.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "tdaot/manifest.h"
#include "tdaot/torch/policy.h"

namespace tdaot::tool {

// tdaot-run's exit codes. main.cpp maps every failure onto them; subcommands return kSuccess
// or, for an outcome of their own, the code named for it here.
enum ExitCode : int {
  kSuccess = 0,
  kTdaotError = 1,  // a tdaot::Error (message on stderr)
  kUsage = 2,       // bad usage: a CLI11 parse error or a UsageError
  kSoakFailed = 3,  // soak: the RSS grew by more than --max-growth-kib
};

// Bad usage that only a subcommand can see once the flags are parsed (exit kUsage).
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One subcommand: its CLI11 app, and the work it does once the command line is parsed. Flags
// are bound to an options object that `run` owns.
struct Command {
  CLI::App* app = nullptr;
  std::function<ExitCode()> run;
};

Command add_inspect(CLI::App& app);
Command add_verify(CLI::App& app);
Command add_run(CLI::App& app);
Command add_bench(CLI::App& app);
Command add_soak(CLI::App& app);
Command add_swap(CLI::App& app);

// A subcommand taking the path of a package as its positional argument.
CLI::App* add_command(CLI::App& app, const char* name, const char* description,
                      std::string& package);

// --sha256 HEX: PolicyOptions::expected_sha256 (verify_package's pin).
void add_sha256(CLI::App* command, std::string& expected_sha256);

// --public-key PUB.pem (repeatable): PolicyOptions::trusted_keys.
void add_public_keys(CLI::App* command, std::vector<std::string>& trusted_keys);

// The flags every loading command shares (--op-lib, --sha256, --public-key, --temp-dir).
struct LoadFlags {
  std::vector<std::string> op_libraries;
  std::string expected_sha256;
  std::vector<std::string> trusted_keys;
  std::string temp_dir;

  PolicyOptions policy_options() const;
};
void add_load_options(CLI::App* command, LoadFlags& flags);

// --batch B (unset: -1).
void add_batch(CLI::App* command, int64_t& batch);

// `requested` when set (>= 0), else the smallest batch the package accepts.
int64_t batch_size(int64_t requested, const Manifest& manifest);

// One tensor [batch, *shape] per spec, on `device`: zeros, or seeded random values suited to
// the dtype.
std::vector<at::Tensor> make_tensors(const std::vector<TensorSpec>& specs,
                                     const std::string& device, int64_t batch, bool random,
                                     uint64_t seed);

// One tensor per manifest input (make_tensors).
std::vector<at::Tensor> make_inputs(const Manifest& manifest, int64_t batch, bool random,
                                    uint64_t seed);

// The width of the longest key of `specs`, to align tables.
int key_width(const std::vector<TensorSpec>& specs);

// One line per output (manifest order): key, dtype, shape and its first values.
void print_outputs(const Manifest& manifest, const std::vector<at::Tensor>& outputs);

}  // namespace tdaot::tool
