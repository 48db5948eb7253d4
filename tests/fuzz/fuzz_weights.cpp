// libFuzzer target: the weight-file reader (cpp/src/core/weights/weights_file.h,
// read_weight_bytes: every check read_weight_file makes, on bytes in memory). An input is a
// weight file's bytes. Anything but a WeightFile or a tdaot::Error is a finding; so is an
// accepted file whose tensors do not hold their dtype's bytes for their shape.
#include <cstdint>
#include <string>

#include "core/weights/weights_file.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  tdaot::fuzz::only_tdaot_errors("fuzz_weights", [&] {
    const tdaot::detail::WeightFile file = tdaot::detail::read_weight_bytes(bytes, "fuzz.tdw");
    size_t total = 0;
    for (const auto& [name, tensor] : file.tensors) {
      uint64_t count = 1;
      for (int64_t d : tensor.shape) count *= static_cast<uint64_t>(d);
      if (count * tdaot::element_size(tensor.dtype) != tensor.nbytes) {
        tdaot::fuzz::fail("fuzz_weights", "tensor '" + name + "' holds the wrong byte count");
      }
      total += tensor.nbytes;
    }
    if (total > bytes.size()) tdaot::fuzz::fail("fuzz_weights", "more tensor bytes than the file");
    tdaot::fuzz::note("accepted: " + std::to_string(file.tensors.size()) + " tensor(s)");
  });
  return 0;
}
