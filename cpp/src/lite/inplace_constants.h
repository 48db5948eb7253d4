// Internal: a lite model instance's constants read in place from its library.
//
// AOTInductor's CPU model copies its constants, at each instance's creation, out of the
// library's read-only .lrodata (_binary_constants_bin_start) into a malloc'd blob
// (model_base.h load_constants): the weights end up resident twice, and once more per binding.
// The lite runtime instead creates the instance with a placeholder constant map (so nothing is
// copied) and then gives it handles onto the library's own bytes, laid out as the generated
// wrapper source beside the library records them (constants_info_, in the blob's order). A
// Buffer constant, one a model may write, is still copied. When the layout cannot be read or
// does not add up to the library's blob, the model keeps AOTInductor's own copy.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/run/model_library.h"

namespace tdaot::detail {

class InplaceConstants {
 public:
  // The constants of `library` as `wrapper_source` (its *.wrapper.cpp) records them, or null
  // with `why` set when they cannot be used in place.
  static std::unique_ptr<const InplaceConstants> read(const ModelLibrary& library,
                                                      const std::string& wrapper_source,
                                                      std::string& why);

  // A new instance of `library` over these constants (ModelInstance adopts it); throws
  // tdaot::Error with the library's message when it cannot be made.
  aoti::ModelHandle create(const ModelLibrary& library) const;

  // The constants each instance still gets its own copy of (Buffers, which a model may write),
  // by their names in the policy (original_fqn, e.g. "norm.running_mean"), in the blob's order.
  std::vector<std::string> copied() const;

  struct Entry {
    std::string name;
    std::string original_fqn;  // the name in the policy, when the record gives one
    int32_t dtype = 0;
    std::vector<int64_t> sizes;
    std::vector<int64_t> strides;
    int64_t offset = 0;      // storage offset, in elements
    int64_t data_size = -1;  // bytes in the blob
    uint8_t* data = nullptr;
    bool copy = false;  // a Buffer: the instance gets its own copy
  };

 private:
  std::vector<Entry> entries_;
};

}  // namespace tdaot::detail
