// The policy side of tdaot-rehearse: a package bound for batch 1 with its safety envelope, the
// way a robot service runs it, behind one interface so the loop is the same for either runtime.
// lite_runner.cpp (tdaot::lite::Binding, no libtorch: the tdaot-rehearse executable) and
// torch_runner.cpp (tdaot::Session of the full runtime: tdaot-rehearse-torch) each define
// make_runner; an executable links one of them, never both (the lite runtime's shim and libtorch
// export the same C functions).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "tdaot/contract.h"
#include "tdaot/dtype.h"
#include "tdaot/envelope.h"
#include "tdaot/manifest.h"
#include "tdaot/supervisor.h"

namespace tdaot::rehearse {

class PolicyRunner {
 public:
  virtual ~PolicyRunner() = default;
  virtual const Manifest& manifest() const = 0;
  virtual const std::optional<Contract>& contract() const = 0;
  // Binds batch 1 (envelope on or off; the contract's supervisor, if it has one, on or off;
  // `record` > 0: the flight recorder keeps that many steps, BindOptions::record); before it,
  // only manifest() and contract() are valid. Throws UsageError when the package cannot serve
  // batch 1 on this runtime.
  virtual void bind(bool envelope, bool supervisor, int64_t record) = 0;
  // The bound input of `key`, [1, n] of `dtype`: written before run().
  virtual void* input_data(const std::string& key, DType dtype) = 0;
  // One step: the recurrent state and is_init are the runner's.
  virtual void run() = 0;
  // The output of `key` after run(), [1, n] of `dtype`.
  virtual const void* output_data(const std::string& key, DType dtype) const = 0;
  virtual const Interventions& interventions() const = 0;
  // The supervisor's state after the last run(); null without a supervisor.
  virtual const SupervisorState* supervisor() const = 0;
  // Writes the recorded steps to a flight log at `path` (bound with record > 0).
  virtual void dump(const std::string& path) const = 0;
  // What serves the batch (the package's model name, and the runtime).
  virtual std::string describe() const = 0;
};

// The runtime this executable links: "lite" or "torch".
extern const char* const kRuntime;
// Opens the package on this executable's runtime. Throws tdaot::Error when it cannot be read.
std::unique_ptr<PolicyRunner> make_runner(const std::string& package);

}  // namespace tdaot::rehearse
