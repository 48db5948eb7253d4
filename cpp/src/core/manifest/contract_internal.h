// Internal: the name matching behind Contract::order, which the Python stage also calls
// (tdaot._C.order_names on a contract it has not built yet); a service calls Contract::order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tdaot {

// Contract::order on one signal's names `policy`; `key` is for messages.
std::vector<int64_t> order_names(const std::string& key, const std::vector<std::string>& policy,
                                 const std::vector<std::string>& names);

}  // namespace tdaot
