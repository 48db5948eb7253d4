// tdaot-run inspect PKG [--json]: the package's manifest as a table, or as JSON. The table
// lists the package's models (name, the batches each serves, tuning) when the manifest does,
// and its deployment contract when it has one; the JSON is the manifest itself.
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "core/manifest/manifest_internal.h"

namespace tdaot::tool {
namespace {

struct InspectOptions {
  std::string package;
  bool json = false;
};

void print_specs(const char* title, const std::vector<TensorSpec>& specs) {
  std::cout << title << "\n";
  const int width = key_width(specs);
  for (const auto& spec : specs) {
    std::cout << "  " << std::left << std::setw(width) << spec.key << "  " << std::setw(8)
              << dtype_name(spec.dtype) << "  " << format_batched_shape(spec.shape) << "\n";
  }
}

std::string batches_text(const BatchRange& batch) {
  return batch.min == batch.max ? std::to_string(batch.min)
                                : std::to_string(batch.min) + ".." + std::to_string(batch.max);
}

// The models table; nothing for a manifest without "models" (one model, the whole range).
void print_models(const std::vector<ModelSpec>& models) {
  if (models.size() == 1 && models[0].tuning.empty()) return;
  size_t name_width = 0;
  size_t batch_width = 0;
  for (const auto& model : models) {
    name_width = std::max(name_width, model.name.size());
    batch_width = std::max(batch_width, batches_text(model.batch).size());
  }
  std::cout << "models (each call runs on the narrowest model serving its batch; \"lite\": also on\n"
               "the lite runtime, tdaot-lite / tdaot::lite, without libtorch)\n";
  for (const auto& model : models) {
    std::cout << "  " << std::left << std::setw(static_cast<int>(name_width)) << model.name
              << "  batch " << std::setw(static_cast<int>(batch_width))
              << batches_text(model.batch) << "  " << std::setw(10) << model.tuning << "  "
              << lite_text(model);
    if (model.chunk_rows) std::cout << "; calls of more than " << *model.chunk_rows << " rows run in slices";
    std::cout << "\n";
  }
}

ExitCode inspect(const InspectOptions& options) {
  const Manifest m = read_manifest(options.package);
  if (options.json) {
    std::cout << m.to_json(2) << "\n";
    return kSuccess;
  }
  const auto row = [](const char* name, const std::string& value) {
    std::cout << std::left << std::setw(14) << name << value << "\n";
  };
  row("package", options.package);
  row("schema", std::to_string(m.schema_version));
  row("device", m.device);
  row("cpu target", m.cpu_target + " (isa " + m.cpu_isa +
                        (m.architecture.empty() ? "" : ", architecture " + m.architecture) + ")");
  row("batch", std::to_string(m.batch.min) + ".." + std::to_string(m.batch.max) +
                   (m.batch.dynamic() ? " (dynamic)" : " (static)"));
  row("interaction", m.interaction_type);
  row("built with", "torch " + m.torch_version + ", tensordict " + m.tensordict_version +
                        ", tdaot " + m.tdaot_version);
  row("source",
      m.source.module_class + (m.source.factory.empty() ? "" : " from " + m.source.factory));
  row("files", std::to_string(m.files.size()) + " with sha256 digests (checked at load; verify)");
  row("weights", m.weights_sha256.empty() ? "no digest recorded (cannot swap weights)"
                                          : "sha256 " + m.weights_sha256 + " (as built)");
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
  const auto names = [](const std::vector<std::string>& list, const std::string& none) {
    std::string text;
    for (const auto& name : list) text += (text.empty() ? "" : ", ") + name;
    return text.empty() ? none : text;
  };
  if (m.patches) row("torch patches", names(*m.patches, "none"));
  if (m.numerics) row("numerics", names(*m.numerics, "none: torch's own results"));
  print_models(m.models);
  if (m.contract) {
    std::cout << "contract (map and clip applied inside the package)\n" << m.contract->describe();
  }
  print_specs("inputs", m.inputs);
  print_specs("outputs", m.outputs);
  return kSuccess;
}

}  // namespace

Command add_inspect(CLI::App& app) {
  auto options = std::make_shared<InspectOptions>();
  CLI::App* command = add_command(app, "inspect", "print the package's manifest", options->package);
  command->add_flag("--json", options->json, "print the manifest as JSON");
  return {command, [options] { return inspect(*options); }};
}

}  // namespace tdaot::tool
