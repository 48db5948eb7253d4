// tdaot-rehearse's summary (rehearsal.h): lines for people and one JSON object.
#include <cstdio>
#include <sstream>
#include <string>

#include "tdaot_rehearse/rehearsal.h"

namespace tdaot::rehearse {

std::string format_summary(const Summary& s) {
  char text[1024];
  std::ostringstream out;
  std::snprintf(text, sizeof text, "simulated      %.2f s (%lld physics steps of %g s, %lld policy steps)\n",
                s.simulated_s, static_cast<long long>(s.physics_steps), s.timestep,
                static_cast<long long>(s.control_steps));
  out << text;
  if (s.floating_base) {
    std::snprintf(text, sizeof text,
                  "distance       %.3f m (forward %.3f m), mean forward speed %.3f m/s\n"
                  "base height    min %.3f m, end %.3f m (start %.3f m)\n"
                  "falls          %lld\n",
                  s.distance, s.forward, s.mean_forward_speed, s.min_height, s.final_height, s.start_height,
                  static_cast<long long>(s.falls));
  } else {
    std::snprintf(text, sizeof text, "base           fixed (no free joint): no distance, height or falls\n");
  }
  out << text;
  std::snprintf(text, sizeof text,
                "first second   peak joint torque %.1f N m (%s; %.1f N m in the first control step), base height "
                "min %.3f m, at 1 s %.3f m\n",
                s.start_peak_torque, s.start_peak_joint.empty() ? "-" : s.start_peak_joint.c_str(), s.handover_torque,
                s.start_min_height, s.start_end_height);
  out << text;
  if (s.supervisor == "none") {
    std::snprintf(text, sizeof text, "supervisor     none; peak joint torque %.1f N m\n", s.peak_torque);
  } else if (s.fallback_at >= 0) {
    std::snprintf(text, sizeof text,
                  "supervisor     %s, fallback from %.2f s; %lld blended, %lld clipped, %lld fallback steps; "
                  "peak joint torque %.1f N m\n",
                  s.supervisor.c_str(), s.fallback_at, static_cast<long long>(s.interventions.blended),
                  static_cast<long long>(s.interventions.clipped), static_cast<long long>(s.interventions.fallback),
                  s.peak_torque);
  } else {
    std::snprintf(text, sizeof text,
                  "supervisor     %s, no fallback; %lld blended, %lld clipped steps; peak joint torque %.1f N m\n",
                  s.supervisor.c_str(), static_cast<long long>(s.interventions.blended),
                  static_cast<long long>(s.interventions.clipped), s.peak_torque);
  }
  out << text;
  if (s.nonfinite_targets > 0) {
    std::snprintf(text, sizeof text, "non-finite     %lld control steps sent a NaN or infinite joint target\n",
                  static_cast<long long>(s.nonfinite_targets));
    out << text;
  }
  std::snprintf(text, sizeof text,
                "interventions  %lld non-finite, %lld rate-limited\n"
                "real time      %.3f s wall, %.1fx real time (policy %.1f us per step, max %.1f us)\n",
                static_cast<long long>(s.interventions.nonfinite),
                static_cast<long long>(s.interventions.rate_limited), s.wall_s, s.real_time_factor,
                s.policy_us_mean, s.policy_us_max);
  out << text;
  return out.str();
}

std::string summary_json(const Summary& s) {
  char text[2560];
  std::snprintf(text, sizeof text,
                "{\"simulated_s\": %.9g, \"physics_steps\": %lld, \"control_steps\": %lld, \"decimation\": %lld, "
                "\"timestep\": %.9g, \"floating_base\": %s, \"start_height\": %.9g, \"min_height\": %.9g, "
                "\"final_height\": %.9g, \"distance\": %.9g, \"forward\": %.9g, \"mean_forward_speed\": %.9g, "
                "\"falls\": %lld, \"nonfinite\": %lld, \"rate_limited\": %lld, \"wall_s\": %.9g, "
                "\"real_time_factor\": %.9g, \"policy_us_mean\": %.9g, \"policy_us_max\": %.9g, "
                "\"joints\": %lld, \"observations\": %lld, \"runtime\": \"%s\", \"model\": \"%s\", "
                "\"start_peak_torque\": %.9g, \"start_peak_joint\": \"%s\", \"start_min_height\": %.9g, "
                "\"start_end_height\": %.9g, \"handover_torque\": %.9g, \"peak_torque\": %.9g, \"scenario\": \"%s\", \"supervisor\": \"%s\", "
                "\"fallback_at\": %.9g, \"blended\": %lld, \"clipped\": %lld, \"fallback\": %lld, "
                "\"nonfinite_targets\": %lld}",
                s.simulated_s, static_cast<long long>(s.physics_steps), static_cast<long long>(s.control_steps),
                static_cast<long long>(s.decimation), s.timestep, s.floating_base ? "true" : "false",
                s.start_height, s.min_height, s.final_height, s.distance, s.forward, s.mean_forward_speed,
                static_cast<long long>(s.falls), static_cast<long long>(s.interventions.nonfinite),
                static_cast<long long>(s.interventions.rate_limited), s.wall_s, s.real_time_factor,
                s.policy_us_mean, s.policy_us_max, static_cast<long long>(s.joints),
                static_cast<long long>(s.observations), s.runtime.c_str(), s.model.c_str(), s.start_peak_torque,
                s.start_peak_joint.c_str(), s.start_min_height, s.start_end_height, s.handover_torque, s.peak_torque,
                s.scenario.c_str(), s.supervisor.c_str(), s.fallback_at,
                static_cast<long long>(s.interventions.blended), static_cast<long long>(s.interventions.clipped),
                static_cast<long long>(s.interventions.fallback), static_cast<long long>(s.nonfinite_targets));
  return text;
}

}  // namespace tdaot::rehearse
