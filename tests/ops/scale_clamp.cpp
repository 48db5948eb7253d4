// tdaot_test::scale_clamp: a fused scale-and-clamp, the custom operator the tests build policies
// with. Compiled as its own shared library (libtdaot_test_ops.so): Python loads it with
// torch.ops.load_library, the native runner with PolicyOptions::op_libraries / --op-lib.
//
// The library only registers the operator with the dispatcher (static initialisers), so
// loading it is all a process needs; AOTInductor calls it through its proxy executor by name.
#include <ATen/ATen.h>
#include <torch/library.h>

namespace {

// y = clamp(x * scale, -limit, limit); a kernel of our own rather than a composite of ATen
// calls, so that the compiled package really depends on this library.
at::Tensor scale_clamp_cpu(const at::Tensor& x, double scale, double limit) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, "tdaot_test::scale_clamp: expected float32, got ",
              x.scalar_type());
  TORCH_CHECK(limit >= 0, "tdaot_test::scale_clamp: limit must be >= 0, got ", limit);
  const at::Tensor in = x.contiguous();
  at::Tensor out = at::empty_like(in);
  const float* src = in.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  const auto s = static_cast<float>(scale);
  const auto l = static_cast<float>(limit);
  for (int64_t i = 0, n = in.numel(); i < n; ++i) dst[i] = std::min(std::max(src[i] * s, -l), l);
  return out;
}

}  // namespace

TORCH_LIBRARY(tdaot_test, m) { m.def("scale_clamp(Tensor x, float scale, float limit) -> Tensor"); }

TORCH_LIBRARY_IMPL(tdaot_test, CPU, m) { m.impl("scale_clamp", &scale_clamp_cpu); }
