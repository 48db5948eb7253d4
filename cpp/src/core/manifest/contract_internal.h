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

#include <optional>

#include "tdaot/contract.h"

namespace tdaot::detail {

// Where a term's newest step sits in an input signal: the input's key, the first element, and
// the elements of one step.
struct TermSlot {
  std::string input;
  int64_t first = 0;
  int64_t size = 0;
};

// The key of the joint output signal `supervisor` watches (its `output`, else the first output
// signal); nullptr when there is none.
const std::string* supervised_output(const Contract& contract, const Supervisor& supervisor);
// The joint term `name` (joint_pos_rel, joint_vel_rel) of joint output `output` in the
// contract's input signals (the first by key), or of any term `name` (find_term).
std::optional<TermSlot> find_joint_term(const Contract& contract, const std::string& output,
                                        const std::string& name);
std::optional<TermSlot> find_term(const Contract& contract, const std::string& name);

// What is wrong with `supervisor` for `contract`: the field and the problem; nullopt when valid.
struct SupervisorProblem {
  std::string field;
  std::string message;
};
std::optional<SupervisorProblem> supervisor_problem(const Contract& contract,
                                                    const Supervisor& supervisor);

}  // namespace tdaot::detail
