// tdaot-bench-openvino-server: OpenVINO's C++ API on the IR benchmarks/peers.py saved from the
// same ExportedProgram (policy.xml/.bin), for the C++ batch-1 table ("OpenVINO (C++)"). Settings
// as peers.py's OPENVINO_CONFIG: one thread, one stream, latency hint, f32 (the CPU plugin's
// default on a bf16-capable CPU is bf16). One InferRequest per batch, its input tensors set and
// filled once (peer_protocol.h); each call is infer() alone.
#include <map>
#include <openvino/openvino.hpp>

#include "peer_protocol.h"

namespace {

ov::element::Type element_type(const std::string& dtype) {
  if (dtype == "float32") return ov::element::f32;
  if (dtype == "uint8") return ov::element::u8;
  if (dtype == "int64") return ov::element::i64;
  if (dtype == "bool") return ov::element::boolean;
  throw std::runtime_error("no OpenVINO type for " + dtype);
}

class OpenVINOPeer {
 public:
  bench::json load(const bench::json& request) {
    specs_ = bench::input_specs(request);
    requests_.clear();
    compiled_ = core_.compile_model(request.at("path").get<std::string>(), "CPU",
                                    ov::inference_num_threads(1), ov::num_streams(1),
                                    ov::hint::performance_mode(ov::hint::PerformanceMode::LATENCY),
                                    ov::hint::inference_precision(ov::element::f32));
    return request.value("batches", bench::json::array());
  }

  void call(int64_t batch) { request(batch).infer(); }

 private:
  ov::InferRequest& request(int64_t batch) {
    auto it = requests_.find(batch);
    if (it != requests_.end()) return it->second;
    ov::InferRequest req = compiled_.create_infer_request();
    std::mt19937 gen(static_cast<uint32_t>(batch));
    for (size_t i = 0; i < specs_.size(); ++i) {
      ov::Shape shape{static_cast<size_t>(batch)};
      for (int64_t d : specs_[i].shape) shape.push_back(static_cast<size_t>(d));
      ov::Tensor tensor(element_type(specs_[i].dtype), shape);
      bench::fill(specs_[i].dtype, tensor.data(), static_cast<int64_t>(tensor.get_size()), gen);
      req.set_input_tensor(i, tensor);
    }
    return requests_.emplace(batch, std::move(req)).first->second;
  }

  ov::Core core_;
  ov::CompiledModel compiled_;
  std::vector<bench::InputSpec> specs_;
  std::map<int64_t, ov::InferRequest> requests_;
};

}  // namespace

int main(int argc, char** argv) {
  OpenVINOPeer peer;
  return bench::serve(peer, argc, argv);
}
