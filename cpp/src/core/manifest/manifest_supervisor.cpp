// The contract's "supervisor" (tdaot/contract.h) read from and written to the manifest; the
// rules it must meet are contract_supervisor.cpp's.
#include <limits>
#include <string>
#include <utility>

#include "core/manifest/contract_fields.h"
#include "core/manifest/contract_internal.h"

namespace tdaot::detail {
namespace {

constexpr std::array<std::string_view, 12> kSupervisorFields{
    "output", "blend_seconds", "blend_max_velocity", "start_gain_fraction", "low", "high",
    "margin", "max_velocity", "max_torque", "max_tilt", "max_rate_limited_steps", "fallback"};

}  // namespace

// The contract's "supervisor" (tdaot/contract.h): its fields read, then the rules of
// contract_supervisor.cpp, each problem named as "contract.supervisor.<field>".
Supervisor parse_supervisor(const Parser& p, const json& value, const Contract& contract) {
  const std::string path = "contract.supervisor";
  const json& object = p.object(value, path);
  refuse_unknown(p, object, path, kSupervisorFields);
  Supervisor s;
  auto member = [&](const char* name) -> const json* {
    auto it = object.find(name);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  };
  if (const json* output = member("output")) s.output = p.text(*output, Parser::join(path, "output"));
  const std::string* key = supervised_output(contract, s);
  if (key == nullptr) p.fail(Parser::join(path, "output"), supervisor_problem(contract, s)->message);
  const size_t n = contract.outputs.at(*key).names.size();
  for (auto [name, target] : {std::pair{"blend_seconds", &s.blend_seconds},
                              std::pair{"start_gain_fraction", &s.start_gain_fraction},
                              std::pair{"margin", &s.margin}, std::pair{"max_tilt", &s.max_tilt}}) {
    if (const json* item = member(name)) *target = number(p, *item, Parser::join(path, name));
  }
  s.blend_max_velocity = values(p, object, path, "blend_max_velocity", n, {}, "", "joint");
  s.low = values(p, object, path, "low", n, {}, "", "joint");
  s.high = values(p, object, path, "high", n, {}, "", "joint");
  s.max_velocity = values(p, object, path, "max_velocity", n, {}, "", "joint");
  s.max_torque = values(p, object, path, "max_torque", n, {}, "", "joint");
  if (const json* steps = member("max_rate_limited_steps")) {
    const std::string field = Parser::join(path, "max_rate_limited_steps");
    s.max_rate_limited_steps = p.integer(*steps, field, std::numeric_limits<int64_t>::min());
  }
  if (const json* fallback = member("fallback")) {
    s.fallback = p.string(*fallback, Parser::join(path, "fallback"));
  }
  if (const auto problem = supervisor_problem(contract, s)) {
    p.fail(Parser::join(path, problem->field.c_str()), problem->message);
  }
  return s;
}

nlohmann::ordered_json supervisor_to_json(const Supervisor& s) {
  nlohmann::ordered_json out;
  if (!s.output.empty()) out["output"] = s.output;
  out["blend_seconds"] = s.blend_seconds;
  if (s.blend_max_velocity.present()) out["blend_max_velocity"] = values_to_json(s.blend_max_velocity);
  out["start_gain_fraction"] = s.start_gain_fraction;
  if (s.low.present()) out["low"] = values_to_json(s.low);
  if (s.high.present()) out["high"] = values_to_json(s.high);
  out["margin"] = s.margin;
  if (s.max_velocity.present()) out["max_velocity"] = values_to_json(s.max_velocity);
  if (s.max_torque.present()) out["max_torque"] = values_to_json(s.max_torque);
  out["max_tilt"] = s.max_tilt;
  out["max_rate_limited_steps"] = s.max_rate_limited_steps;
  out["fallback"] = s.fallback;
  return out;
}

}  // namespace tdaot::detail
