// tdaot::lite::Policy: the shared core's package checks, then each lite model's recorded needs
// checked against this process, then its library loaded. No libtorch anywhere (tdaot/lite.h).
#include <dlfcn.h>

#include <algorithm>
#include <utility>

#include "core/host/host.h"
#include "core/package/package.h"
#include "core/run/arrayref_dtypes.h"
#include "core/weights/weights_file.h"
#include "lite/policy_impl.h"
#include "lite/shim/shim.h"

// One of SLEEF's functions, for its library's address (the models resolve SLEEF through us).
extern "C" float Sleef_expf_u10(float);

namespace tdaot::lite {
namespace {

// The model libraries resolve torch's shim functions (this library) and SLEEF's from the
// process's global scope. A program linked to libtdaot_lite has both there; a process that
// dlopen-ed it with RTLD_LOCAL (a plugin, Python's ctypes) does not, so widen their scope once.
void make_provided_symbols_global() {
  static const bool done = [] {
    for (void* address : {reinterpret_cast<void*>(&aoti_torch_dtype_float32),
                          reinterpret_cast<void*>(&Sleef_expf_u10)}) {
      Dl_info info{};
      if (::dladdr(address, &info) != 0 && info.dli_fname != nullptr) {
        ::dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);  // never unloaded
      }
    }
    return true;
  }();
  (void)done;
}

std::string join(const std::vector<std::string>& names, size_t limit = 8) {
  std::string text;
  for (size_t i = 0; i < names.size() && i < limit; ++i) {
    text += (i == 0 ? "" : ", ") + names[i];
  }
  if (names.size() > limit) text += ", ... (" + std::to_string(names.size()) + " in all)";
  return text;
}

bool runs_lite(const ModelSpec& model) { return model.lite && model.lite->runs; }

// "'model' (batch 1..64): needs libtorch: aoti_torch_cpu_addmm_out (addmm); 'b1' ...".
std::string why_not_lite(const Manifest& manifest) {
  std::string text;
  for (const ModelSpec& model : manifest.models) {
    text += (text.empty() ? "" : "; ") + std::string("'") + model.name + "' (batch " +
            std::to_string(model.batch.min) +
            (model.batch.dynamic() ? ".." + std::to_string(model.batch.max) : "") + "): " +
            (model.lite ? model.lite->why : "no lite record (built before tdaot recorded it)");
  }
  return text;
}

}  // namespace
}  // namespace tdaot::lite

std::vector<std::string> tdaot::detail::unprovided(const std::vector<std::string>& needs) {
  std::vector<std::string> missing;
  for (const std::string& symbol : needs) {
    if (::dlsym(RTLD_DEFAULT, symbol.c_str()) == nullptr) missing.push_back(symbol);
  }
  return missing;
}

namespace tdaot::lite {

// The bytes are read, pinned, verified and signature-checked by the core, then dropped once the
// models are loaded: the process keeps only the manifest and the mapped libraries.
Policy::Impl::Impl(const std::string& package_path, const PolicyOptions& options)
    : Impl((make_provided_symbols_global(), detail::Package(package_path, options)), options) {}

Policy::Impl::Impl(const detail::Package& package, const PolicyOptions& options)
    : PolicyCore(package, options) {
  detail::HostInfo host;  // no torch, no CUDA: the version check gives way to the needs check
  host.cpu_features = detail::cpu_features();
  detail::check_host(manifest, path, host);
  package.check_device_keys();
  std::vector<std::string> names;
  for (const ModelSpec& spec : manifest.models) {
    if (runs_lite(spec)) names.push_back(spec.name);
  }
  if (names.empty()) {
    throw HostMismatchError(path, "package '" + path +
                                      "' has no model that runs on the lite runtime (no "
                                      "libtorch): " + why_not_lite(manifest) +
                                      "; load it with tdaot::Policy (tdaot::runtime)");
  }
  for (const ModelSpec& spec : manifest.models) {
    if (!runs_lite(spec)) continue;
    const std::vector<std::string> missing = detail::unprovided(spec.lite->needs);
    if (!missing.empty()) {
      throw HostMismatchError(path, "package '" + path + "' model '" + spec.name +
                                        "' needs symbols the lite runtime does not provide: " +
                                        join(missing) + " (refused before loading it)");
    }
  }
  const detail::Extraction files = package.extract(options.temp_dir, names);
  for (const std::string& name : names) {
    const ModelSpec& spec = *std::find_if(manifest.models.begin(), manifest.models.end(),
                                          [&](const ModelSpec& m) { return m.name == name; });
    std::unique_ptr<detail::ModelLibrary> library;
    try {
      library = detail::ModelLibrary::open(files.model(name).library, RTLD_NOW | RTLD_LOCAL);
    } catch (const Error& e) {
      throw PackageError(path, "package '" + path + "' model '" + name + "': " + e.what());
    }
    if (!library) {
      throw PackageError(path, "package '" + path + "' model '" + name +
                                   "' lacks the minimal arrayref entry point its manifest "
                                   "records for the lite runtime");
    }
    detail::check_arrayref_dtypes(files.model(name).library, manifest, name, path);
    auto weights = std::make_unique<detail::LiteModelWeights>(*library);
    // The generated source lies beside the library, "<hash>.wrapper.cpp" for "<hash>.wrapper.so".
    const std::string& so = files.model(name).library;
    std::string why;  // a model whose constants cannot be used in place keeps AOTInductor's copy
    auto inplace = detail::InplaceConstants::read(*library, so.substr(0, so.size() - 3) + ".cpp", why);
    if (inplace) why.clear();
    models.push_back(Model{spec, std::move(library), std::move(weights), std::move(inplace), std::move(why)});
  }
  for (const Model& model : models) loaded_specs.push_back(&model.spec);
  // The extracted files go with `files`; the libraries stay mapped.
}

const Policy::Impl::Model& Policy::Impl::model_for(int64_t batch) const {
  const size_t best = model_index(batch);
  if (best != npos) return models[best];
  std::string served;
  for (int64_t size : batch_sizes()) served += (served.empty() ? "" : ", ") + std::to_string(size);
  throw BatchSizeError("", "package '" + path + "' has no lite model for batch size " +
                               std::to_string(batch) + "; the lite runtime serves batch sizes " +
                               served + " (models: " + manifest.describe_models() + ")");
}

std::string Policy::Impl::describe(const Model& model) const {
  return "model '" + model.spec.name + "' of package '" + path + "'";
}

Policy::Policy(const std::string& package_path, const PolicyOptions& options)
    : PolicyBase(std::make_shared<const Impl>(package_path, options), "tdaot::lite::Policy") {}

std::vector<ModelConstants> Policy::constants() const {
  std::vector<ModelConstants> result;
  for (const Impl::Model& model : core_as<Impl>().models) {
    const bool in_place = model.inplace != nullptr;
    result.push_back({model.spec.name, in_place, model.inplace_why,
                      in_place ? model.inplace->copied() : std::vector<std::string>{}});
  }
  return result;
}
std::vector<detail::SwapTarget> Policy::Impl::swap_targets() const {
  std::vector<detail::SwapTarget> targets;
  for (const Model& model : models) targets.push_back(detail::swap_target(model.spec.name, *model.weights));
  return targets;
}

void Policy::Impl::apply_swap(
    const detail::WeightFile&,
    const std::vector<std::map<std::string, detail::WeightTensor>>& per_model) const {
  for (size_t i = 0; i < models.size(); ++i) detail::publish_swap(per_model[i], *models[i].weights);
}

void Policy::Impl::exchange_weights() const {
  for (const Model& model : models) model.weights->sets().exchange();
}

}  // namespace tdaot::lite
