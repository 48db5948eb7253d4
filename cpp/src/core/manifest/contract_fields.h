// Internal: the field readers that the contract's parts (manifest_contract.cpp: signals and
// terms; manifest_supervisor.cpp: the supervisor) share, each naming the field at fault.
#pragma once

#include <algorithm>
#include <array>
#include <string>
#include <string_view>

#include "core/manifest/manifest_schema.h"

namespace tdaot::detail {

// Refuses a member of `object` not in `known`, naming it as "<path>.<member>": a misspelt
// field must not silently switch a limit off.
template <size_t N>
void refuse_unknown(const Parser& p, const json& object, const std::string& path,
                    const std::array<std::string_view, N>& known) {
  for (const auto& [name, value] : object.items()) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string list;
      for (const auto& field : known) list.append(list.empty() ? "" : " ").append(field);
      p.fail(Parser::join(path, name.c_str()), "unknown contract field (known: " + list + ")");
    }
  }
}

// A finite number, or the field named as at fault.
double number(const Parser& p, const json& value, const std::string& field);

// A number, or a list of one number per element; absent or null: `fallback`. `prefix` starts
// each problem ("term 'gait_phase': "), `per` says what an element is ("name").
SignalValues values(const Parser& p, const json& signal, const std::string& path,
                    const char* name, size_t n, SignalValues fallback,
                    const std::string& prefix = "", const char* per = "name");

// SignalValues as the manifest holds them: one number, or one per element.
nlohmann::ordered_json values_to_json(const SignalValues& values);

// The contract's "supervisor" (manifest_supervisor.cpp), read after its outputs.
Supervisor parse_supervisor(const Parser& p, const json& value, const Contract& contract);
nlohmann::ordered_json supervisor_to_json(const Supervisor& s);

}  // namespace tdaot::detail
