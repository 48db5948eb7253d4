// What the safety envelope of a step did (tdaot::Session, tdaot::lite::Binding). Torch-free.
#pragma once

#include <cstdint>

namespace tdaot {

// What a session's safety envelope did, counted in steps since the session was created.
struct Interventions {
  int64_t nonfinite = 0;     // steps with a NaN or infinite input or output element
  int64_t rate_limited = 0;  // steps where some output element was held to its max_delta
  // The supervisor (tdaot/supervisor.h), in steps with at least one row so:
  int64_t blended = 0;   // targets blended by a soft start
  int64_t clipped = 0;   // a target clipped to the supervisor's limits
  int64_t fallback = 0;  // targets a fallback's (held or damped)
};

}  // namespace tdaot
