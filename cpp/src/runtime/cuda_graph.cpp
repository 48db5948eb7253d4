// The CUDA graph of a bound run (cuda_graph.h). Without CUDA, only the refusal.
#include "runtime/cuda_graph.h"

#include "tdaot/errors.h"

#ifdef TDAOT_WITH_CUDA
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/inductor/aoti_runner/model_container_runner.h>

#include <exception>
#endif

namespace tdaot::detail {

#ifdef TDAOT_WITH_CUDA

struct CudaGraphRun::State {
  std::unique_ptr<torch::inductor::AOTIModelContainerRunner> runner;
  at::cuda::CUDAGraph graph;
  c10::DeviceIndex device = 0;
};

namespace {

// One run of the runner on `inputs`, its outputs copied into `outputs` (on the current stream).
void run_into(torch::inductor::AOTIModelContainerRunner& runner,
              const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) {
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  const std::vector<at::Tensor> results = runner.run(inputs);
  if (results.size() != outputs.size()) {
    throw Error("returned " + std::to_string(results.size()) + " outputs, but the manifest lists " +
                std::to_string(outputs.size()));
  }
  for (size_t i = 0; i < results.size(); ++i) {
    at::Tensor out = outputs[i];
    out.copy_(results[i]);
  }
}

}  // namespace

CudaGraphRun::CudaGraphRun(const ExtractedModel& files, c10::Device device,
                           const std::vector<at::Tensor>& inputs,
                           const std::vector<at::Tensor>& outputs, const std::string& what)
    : state_(std::make_unique<State>()) {
  state_->device = device.index();
  const c10::cuda::CUDAGuard device_guard(device);
  try {
    auto& registry = torch::inductor::getAOTIModelRunnerRegistry();
    const auto create = registry.find("cuda");
    if (create == registry.end()) throw Error("this torch provides no AOTInductor CUDA runner");
    state_->runner = create->second(files.library, 1, device.str(), files.directory,
                                    /*run_single_threaded=*/true);
    if (!files.weights_blob.empty()) state_->runner->update_constant_buffer_from_blob(files.weights_blob);
    // A capture must not run on the legacy default stream; a side stream from torch's pool,
    // joined to the caller's current stream so that inputs written before bind() are seen.
    const c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream(device.index());
    const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, device.index());
    caller.synchronize();
    const c10::cuda::CUDAStreamGuard stream_guard(side);
    run_into(*state_->runner, inputs, outputs);  // warm-up, outside the graph
    side.synchronize();
    // Thread-local capture mode: other threads' CUDA calls (other bindings, Policy::run) go
    // on meanwhile; only this thread must not call capture-unsafe CUDA APIs.
    state_->graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    try {
      run_into(*state_->runner, inputs, outputs);
    } catch (...) {
      try {
        state_->graph.capture_end();
      } catch (...) {  // the first failure is the one to report
      }
      throw;
    }
    state_->graph.capture_end();
    side.synchronize();
  } catch (const std::exception& e) {
    throw ExecutionError(what + ": the CUDA graph could not be captured: " + e.what());
  }
}

void CudaGraphRun::replay() {
  const c10::cuda::CUDAGuard device_guard(state_->device);
  state_->graph.replay();  // on the current stream
}

#else  // !TDAOT_WITH_CUDA

struct CudaGraphRun::State {};

CudaGraphRun::CudaGraphRun(const ExtractedModel&, c10::Device, const std::vector<at::Tensor>&,
                           const std::vector<at::Tensor>&, const std::string& what) {
  throw Error(what + ": BindOptions::cuda_graph needs a tdaot runtime compiled against a torch "
                     "with CUDA");
}

void CudaGraphRun::replay() {}

#endif

CudaGraphRun::~CudaGraphRun() = default;

}  // namespace tdaot::detail
