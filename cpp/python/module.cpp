// tdaot._C: the pybind11 bindings over tdaot::Policy, the same runner C++ services link.
//
// C++ exceptions are translated to the classes of the same name in tdaot.errors,
// so Python code catches one tdaot.TdaotError hierarchy for build and run alike.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/extension.h>

#include "bindings.h"
#include "core/manifest/contract_internal.h"
#include "core/manifest/manifest_internal.h"
#include "tdaot/contract.h"
#include "tdaot/torch/policy.h"
#include "tdaot/torch/session.h"

namespace py = pybind11;

namespace {

using tdaot::python::interventions_dict;
using tdaot::python::supervisor_options;
using tdaot::python::supervisor_tuple;

// Raises tdaot.errors.<name>(message, detail) as the pending Python exception.
void raise_python(const char* name, const char* message, const std::string* detail = nullptr) {
  py::object cls = py::module_::import("tdaot.errors").attr(name);
  py::object instance = detail ? cls(message, *detail) : cls(message);
  PyErr_SetObject(cls.ptr(), instance.ptr());
}

void translate(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const tdaot::MissingKeyError& e) {
    raise_python("MissingKeyError", e.what(), &e.key());
  } catch (const tdaot::UnknownKeyError& e) {
    raise_python("UnknownKeyError", e.what(), &e.key());
  } catch (const tdaot::DtypeError& e) {
    raise_python("DtypeError", e.what(), &e.key());
  } catch (const tdaot::ShapeError& e) {
    raise_python("ShapeError", e.what(), &e.key());
  } catch (const tdaot::BatchSizeError& e) {
    raise_python("BatchSizeError", e.what(), &e.key());
  } catch (const tdaot::DeviceError& e) {
    raise_python("DeviceError", e.what(), &e.key());
  } catch (const tdaot::LayoutError& e) {
    raise_python("LayoutError", e.what(), &e.key());
  } catch (const tdaot::InputError& e) {
    raise_python("InputError", e.what(), &e.key());
  } catch (const tdaot::MissingOperatorError& e) {
    py::object cls = py::module_::import("tdaot.errors").attr("MissingOperatorError");
    PyErr_SetObject(cls.ptr(), cls(e.what(), e.path(), e.op()).ptr());
  } catch (const tdaot::SignatureError& e) {
    raise_python("SignatureError", e.what(), &e.path());
  } catch (const tdaot::IntegrityError& e) {
    raise_python("IntegrityError", e.what(), &e.path());
  } catch (const tdaot::ManifestError& e) {
    raise_python("ManifestError", e.what(), &e.path());
  } catch (const tdaot::HostMismatchError& e) {
    raise_python("HostMismatchError", e.what(), &e.path());
  } catch (const tdaot::PackageError& e) {
    raise_python("PackageError", e.what(), &e.path());
  } catch (const tdaot::ContractError& e) {
    raise_python("ContractError", e.what(), &e.key());
  } catch (const tdaot::InvalidArgumentError& e) {
    raise_python("InvalidArgumentError", e.what());
  } catch (const tdaot::ExecutionError& e) {
    raise_python("ExecutionError", e.what());
  } catch (const tdaot::InternalError& e) {
    raise_python("InternalError", e.what());
  } catch (const tdaot::WeightsError& e) {
    py::object cls = py::module_::import("tdaot.errors").attr("WeightsError");
    PyErr_SetObject(cls.ptr(), cls(e.what(), e.path(), e.tensor()).ptr());
  } catch (const tdaot::Error& e) {
    raise_python("TdaotError", e.what());
  }
}

// The load options' one definition is tdaot::PolicyOptions: the binding's defaults, tdaot.load's
// and the stub's are read from it (load_option_defaults; tests/python/test_load_options.py).
const tdaot::PolicyOptions kLoadDefaults{};
// Python leaves torch's thread count alone unless asked (PolicyOptions' 0): a Python process
// usually runs other torch code too. C++'s default of 1 is for a control loop.
constexpr int kPythonIntraOpThreads = 0;

// The same members in the same order as PolicyOptions: a field added there changes its size and
// stops this build until it is bound here, in load_option_defaults, tdaot.load and the stub.
struct PolicyOptionsFields {
  std::string expected_sha256;
  std::vector<std::string> trusted_keys;
  std::string temp_dir;
  uint64_t max_package_bytes;
  std::string model_name;
  int intra_op_threads, num_runners, warmup_runs, device_index;
  bool keep_freed_memory;
  std::vector<std::string> op_libraries;
};
static_assert(sizeof(PolicyOptionsFields) == sizeof(tdaot::PolicyOptions),
              "tdaot::PolicyOptions changed: bind the new field (see PolicyOptionsFields)");

// Every PolicyOptions field by name with its default; device_index is C++ only (CUDA packages
// load on the current device from Python).
py::dict load_option_defaults() {
  py::dict d;
  d["expected_sha256"] = kLoadDefaults.expected_sha256;
  d["trusted_keys"] = kLoadDefaults.trusted_keys;
  d["temp_dir"] = kLoadDefaults.temp_dir;
  d["max_package_bytes"] = kLoadDefaults.max_package_bytes;
  d["model_name"] = kLoadDefaults.model_name;
  d["intra_op_threads"] = kLoadDefaults.intra_op_threads;
  d["num_runners"] = kLoadDefaults.num_runners;
  d["warmup_runs"] = kLoadDefaults.warmup_runs;
  d["device_index"] = kLoadDefaults.device_index;
  d["keep_freed_memory"] = kLoadDefaults.keep_freed_memory;
  d["op_libraries"] = kLoadDefaults.op_libraries;
  return d;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "Native tdaot runner (tdaot::Policy); use tdaot.load() rather than this module.";
  py::register_exception_translator(&translate);

  m.def("load_option_defaults", &load_option_defaults,
        "tdaot::PolicyOptions' fields and their C++ defaults, by name (tdaot.load's source).");
  m.attr("PYTHON_INTRA_OP_THREADS") = kPythonIntraOpThreads;

  py::class_<tdaot::Policy>(m, "Policy")
      .def(py::init([](const std::string& path, int intra_op_threads, int num_runners,
                       int warmup_runs, std::vector<std::string> op_libraries,
                       std::string expected_sha256, std::string temp_dir,
                       uint64_t max_package_bytes, std::string model_name,
                       std::vector<std::string> trusted_keys, bool keep_freed_memory) {
             tdaot::PolicyOptions options;
             options.keep_freed_memory = keep_freed_memory;
             options.model_name = std::move(model_name);
             options.intra_op_threads = intra_op_threads;
             options.num_runners = num_runners;
             options.warmup_runs = warmup_runs;
             options.op_libraries = std::move(op_libraries);
             options.expected_sha256 = std::move(expected_sha256);
             options.temp_dir = std::move(temp_dir);
             options.max_package_bytes = max_package_bytes;
             options.trusted_keys = std::move(trusted_keys);
             py::gil_scoped_release unlocked;
             return std::make_unique<tdaot::Policy>(path, options);
           }),
           // The defaults are PolicyOptions' own (load_option_defaults), except intra_op_threads.
           py::arg("path"), py::kw_only(), py::arg("intra_op_threads") = kPythonIntraOpThreads,
           py::arg("num_runners") = kLoadDefaults.num_runners,
           py::arg("warmup_runs") = kLoadDefaults.warmup_runs,
           py::arg("op_libraries") = kLoadDefaults.op_libraries,
           py::arg("expected_sha256") = kLoadDefaults.expected_sha256,
           py::arg("temp_dir") = kLoadDefaults.temp_dir,
           py::arg("max_package_bytes") = kLoadDefaults.max_package_bytes,
           py::arg("model_name") = kLoadDefaults.model_name,
           py::arg("trusted_keys") = kLoadDefaults.trusted_keys,
           py::arg("keep_freed_memory") = kLoadDefaults.keep_freed_memory,
           "Loads a package (see tdaot::PolicyOptions; intra_op_threads=0 leaves torch's alone; "
           "model_name loads one model only).")
      .def_property_readonly("path", &tdaot::Policy::path)
      .def_property_readonly("sha256", &tdaot::Policy::sha256)
      .def_property_readonly("manifest_json",
                             [](const tdaot::Policy& p) { return p.manifest().to_json(); })
      .def(
          "run",
          [](const tdaot::Policy& p, const tdaot::TensorMap& inputs) {
            py::gil_scoped_release unlocked;
            return p.run(inputs);
          },
          py::arg("inputs"), "Runs with inputs keyed by manifest key; returns outputs keyed alike.")
      .def(
          "run_positional",
          [](const tdaot::Policy& p, const std::vector<at::Tensor>& inputs) {
            py::gil_scoped_release unlocked;
            return p.run_positional(inputs);
          },
          py::arg("inputs"),
          "Runs with inputs in manifest order; returns outputs in manifest order.")
      .def(
          "bind",
          [](const tdaot::Policy& p, int64_t batch, bool cuda_graph, bool envelope,
             const py::object& supervisor, int64_t record) {
            tdaot::BindOptions options;
            options.cuda_graph = cuda_graph;
            options.envelope = envelope;
            options.supervisor = supervisor_options(supervisor);
            options.record = record;
            py::gil_scoped_release unlocked;
            return p.bind(batch, options);
          },
          py::arg("batch"), py::arg("cuda_graph") = false, py::arg("envelope") = false,
          py::arg("supervisor") = py::none(), py::arg("record") = 0,
          "Preallocated inputs and outputs for `batch` rows (tdaot::Binding); cuda_graph: "
          "capture the run as a CUDA graph and replay it per call (CUDA packages); envelope: "
          "the safety envelope around every run (interventions counts); supervisor: None (the "
          "contract's), False (none) or a Supervisor's fields (replacing it); record: the steps "
          "the flight recorder keeps (0: none).")
      .def(
          "swap_weights",
          [](const tdaot::Policy& p, const std::string& path) {
            py::gil_scoped_release unlocked;
            p.swap_weights(path);
          },
          py::arg("path"), "Checks a weight file, then makes it live between calls.")
      .def(
          "rollback_weights",
          [](const tdaot::Policy& p) {
            py::gil_scoped_release unlocked;
            p.rollback_weights();
          },
          "Makes the weights live before the last swap live again.")
      .def_property_readonly("weights_sha256", &tdaot::Policy::weights_sha256);

  m.def(
      "weights_signing_payload",
      [](const std::string& path) {
        return py::bytes(tdaot::weights_signing_payload(path));
      },
      py::arg("path"), "The bytes a signature over a weight file covers, as the runtime reads it.");
  m.def(
      "verify_weights",
      [](const std::string& path, const std::vector<std::string>& trusted_keys) {
        tdaot::WeightFileInfo info;
        {
          py::gil_scoped_release unlocked;
          info = tdaot::verify_weights(path, trusted_keys);
        }
        py::dict result;
        result["base_sha256"] = info.base_sha256;
        result["base_manifest_sha256"] = info.base_manifest_sha256;
        result["weights_sha256"] = info.weights_sha256;
        result["signed_by"] = info.signed_by;
        return result;
      },
      py::arg("path"), py::arg("trusted_keys") = std::vector<std::string>{},
      "Checks a weight file as swap_weights does before changing anything (and its signature, "
      "with trusted_keys); returns {base_sha256, base_manifest_sha256, weights_sha256, signed_by}.");
  m.def(
      "file_kind",
      [](const std::string& path) {
        return tdaot::file_kind(path) == tdaot::FileKind::kPackage ? "package" : "weights";
      },
      py::arg("path"),
      "'package' or 'weights', from the file's first bytes; PackageError for anything else.");

  // The tensors a binding hands out share its memory: writing them from Python writes the
  // binding's inputs. run() and reset() release the GIL; a second thread using the same binding
  // meanwhile gets tdaot.TdaotError, as in C++. A binding keeps the loaded model alive itself.
  py::class_<tdaot::Binding> binding(m, "Binding");
  tdaot::python::add_flight_recorder(binding);
  binding.def_property_readonly("batch", &tdaot::Binding::batch)
      .def_property_readonly("model", &tdaot::Binding::model,
                             "The name of the package's model that serves this batch size.")
      .def_property_readonly("allocation_free", &tdaot::Binding::allocation_free,
                             "Whether run() takes the allocation-free path.")
      .def_property_readonly("cuda_graph", &tdaot::Binding::cuda_graph,
                             "Whether run() replays a CUDA graph captured when bound.")
      .def_property_readonly("inputs", &tdaot::Binding::inputs,
                             "The input tensors (the binding's own memory), in manifest order.")
      .def_property_readonly("outputs", &tdaot::Binding::outputs,
                             "The output tensors (the binding's own memory), in manifest order.")
      .def_property_readonly(
          "interventions",
          [](const tdaot::Binding& b) { return interventions_dict(b.interventions()); },
          "The envelope's and the supervisor's interventions so far (zeros without either).")
      .def_property_readonly("supervised", &tdaot::Binding::supervised,
                             "Whether a supervisor guards the joint targets.")
      .def(
          "supervisor",
          [](const tdaot::Binding& b, int64_t row) { return supervisor_tuple(b.supervisor(row)); },
          py::arg("row") = 0,
          "Row `row`'s supervisor state: (mode, gain_scale, damping_scale, blend, steps).")
      .def("input", &tdaot::Binding::input, py::arg("key"), "The input tensor of a manifest key.")
      .def("output", &tdaot::Binding::output, py::arg("key"),
           "The output tensor of a manifest key.")
      .def(
          "run",
          [](tdaot::Binding& b) {
            py::gil_scoped_release unlocked;
            b.run();
          },
          "Runs on the inputs in place; writes the outputs (and a recurrent package's state).")
      .def(
          "reset",
          [](tdaot::Binding& b, const std::optional<at::Tensor>& mask) {
            py::gil_scoped_release unlocked;
            if (mask) {
              b.reset(*mask);
            } else {
              b.reset();
            }
          },
          py::arg("mask") = py::none(),
          "Recurrent packages: zeroes the state (of the rows where the bool [batch] mask is true) "
          "and marks is_init.");

  // A session keeps the loaded model alive by itself (it shares the Policy's state), so no
  // keep_alive is needed. step() and reset() release the GIL; a second thread using the same
  // session meanwhile gets tdaot.TdaotError, as in C++.
  py::class_<tdaot::Session>(m, "Session")
      .def(py::init([](const tdaot::Policy& policy, int64_t batch, const py::object& supervisor) {
             return std::make_unique<tdaot::Session>(policy, batch, supervisor_options(supervisor));
           }),
           py::arg("policy"), py::arg("batch"), py::arg("supervisor") = py::none())
      .def_property_readonly("supervised", &tdaot::Session::supervised,
                             "Whether a supervisor guards the joint targets.")
      .def(
          "supervisor",
          [](const tdaot::Session& s, int64_t row) { return supervisor_tuple(s.supervisor(row)); },
          py::arg("row") = 0,
          "Row `row`'s supervisor state: (mode, gain_scale, damping_scale, blend, steps).")
      .def_property_readonly("batch", &tdaot::Session::batch)
      .def_property_readonly("input_keys",
                             [](const tdaot::Session& s) {
                               std::vector<std::string> keys;
                               for (const auto& spec : s.inputs()) keys.push_back(spec.key);
                               return keys;
                             })
      .def_property_readonly("state", &tdaot::Session::state,
                             "The state tensors (the session's own storage), keyed by input key.")
      .def_property_readonly(
          "interventions",
          [](const tdaot::Session& s) { return interventions_dict(s.interventions()); },
          "The safety envelope's and the supervisor's interventions so far: steps by kind.")
      .def(
          "step",
          [](tdaot::Session& s, const tdaot::TensorMap& inputs) {
            py::gil_scoped_release unlocked;
            return s.step(inputs);
          },
          py::arg("inputs"), "One step with the non-state inputs keyed by manifest key.")
      .def(
          "step_positional",
          [](tdaot::Session& s, const std::vector<at::Tensor>& inputs) {
            py::gil_scoped_release unlocked;
            return s.step_positional(inputs);
          },
          py::arg("inputs"), "One step with the non-state inputs in input_keys order.")
      .def(
          "reset",
          [](tdaot::Session& s, const std::optional<at::Tensor>& mask) {
            py::gil_scoped_release unlocked;
            if (mask) {
              s.reset(*mask);
            } else {
              s.reset();
            }
          },
          py::arg("mask") = py::none(),
          "Zeroes the state (of the rows where the bool [batch] mask is true) and marks is_init.");

  m.def(
      "verify_package",
      [](const std::string& path, const std::string& expected_sha256,
         const std::vector<std::string>& trusted_keys) {
        py::gil_scoped_release unlocked;
        return tdaot::verify_package(path, expected_sha256, trusted_keys);
      },
      py::arg("path"), py::arg("expected_sha256") = std::string(),
      py::arg("trusted_keys") = std::vector<std::string>{},
      "Checks a package's digests (and signature, with trusted_keys) without loading it; "
      "returns its sha256.");
  m.attr("SIGNATURE_ENTRY") = std::string(tdaot::kSignatureEntry);
  m.def(
      "read_manifest_bytes",
      [](const std::string& path) {
        std::string bytes;
        {
          py::gil_scoped_release unlocked;
          bytes = tdaot::read_manifest_bytes(path);
        }
        return py::bytes(bytes);
      },
      py::arg("path"),
      "The manifest JSON exactly as the package stores it: what a signature signs.");

  // The one manifest parser and validator (tdaot/manifest.h). tdaot.manifest reads every
  // manifest through these and checks every manifest it writes with parse_manifest_json; each
  // returns the manifest as normalised JSON (Manifest::to_json).
  m.attr("MANIFEST_METADATA_KEY") = tdaot::kManifestMetadataKey;
  m.attr("MANIFEST_SCHEMA_VERSION") = tdaot::kManifestSchemaVersion;
  py::tuple records(tdaot::kBookkeepingRecords.size());
  for (size_t i = 0; i < tdaot::kBookkeepingRecords.size(); ++i) {
    const std::string_view record = tdaot::kBookkeepingRecords[i];
    records[i] = py::str(record.data(), record.size());
  }
  m.attr("BOOKKEEPING_RECORDS") = records;
  m.def(
      "read_manifest_json",
      [](const std::string& path) {
        py::gil_scoped_release unlocked;
        return tdaot::read_manifest(path).to_json();
      },
      py::arg("path"),
      "The manifest of a package, read (safely, without loading it) and validated, as "
      "normalised JSON.");
  m.def(
      "parse_manifest_json",
      [](const std::string& json, const std::string& origin, bool sealed) {
        return tdaot::parse_manifest(json, origin,
                                     sealed ? tdaot::Sealing::sealed : tdaot::Sealing::unsealed)
            .to_json();
      },
      py::arg("json"), py::arg("origin") = std::string("<string>"), py::kw_only(),
      py::arg("sealed") = true,
      "Validates manifest JSON (sealed=False: before the package's file digests exist) and "
      "returns it normalised; raises tdaot.ManifestError naming origin and the field.");
  m.def("order_names", &tdaot::order_names, py::arg("key"), py::arg("policy"), py::arg("names"),
        "Contract::order on one signal's names: the policy's index of each given name; raises "
        "tdaot.ContractError naming the first missing and the first extra name.");
  m.def("manifest_dtype_names", &tdaot::dtype_names, "The manifest's dtype names, in order.");
  m.def(
      "digest_exempt", [](const std::string& name) { return tdaot::digest_exempt(name); },
      py::arg("name"),
      "Whether the archive file name (without the top folder) is left out of the manifest's "
      "files: AOTInductor's metadata JSONs, the zip writer's bookkeeping records and the "
      "signature entry.");
}
