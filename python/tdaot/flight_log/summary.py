"""What ``tdaot log show`` prints of a flight log: the recording, its steps (count, seq range,
gaps), the interventions and the steps they happened on, resets, the supervisor's modes over
time and the step-time percentiles."""

from __future__ import annotations

import datetime
from collections.abc import Sequence

import numpy as np

from tdaot.flight_log.model import FlightLog

#: Step-time percentiles ``tdaot log show`` prints.
PERCENTILES = (50, 90, 99)
# Steps listed by name before "and N more".
_LISTED = 10


def step_times(log: FlightLog) -> dict[str, float]:
    """Step durations in microseconds: p50, p90, p99 and max (empty without steps)."""
    if not log.steps:
        return {}
    us = np.array([step.duration_ns for step in log.steps], dtype=np.float64) / 1e3
    times = {f"p{p}": float(np.percentile(us, p)) for p in PERCENTILES}
    times["max"] = float(us.max())
    return times


def intervention_steps(log: FlightLog) -> list[tuple[int, dict[str, int]]]:
    """(seq, {kind: how much its count grew}) for each step whose counts grew since the step
    before (the first step against zero when it is seq 1, else not known), or with an envelope
    flag."""
    found = []
    for i, step in enumerate(log.steps):
        if i > 0 and step.seq == log.steps[i - 1].seq + 1:
            before = log.steps[i - 1].interventions
        elif step.seq == 1:
            before = {}
        else:
            before = None
        grown = {}
        if before is not None:
            grown = {k: v - before.get(k, 0) for k, v in step.interventions.items() if v != before.get(k, 0)}
        if step.nonfinite and "nonfinite" not in grown:
            grown["nonfinite"] = 1
        if step.rate_limited and "rate_limited" not in grown:
            grown["rate_limited"] = 1
        if grown:
            found.append((step.seq, grown))
    return found


def supervisor_spans(log: FlightLog) -> list[list[tuple[str, int, int]]]:
    """Per row, the runs of one supervisor mode: (mode, first seq, last seq); empty without a
    supervisor."""
    if not log.supervised or not log.steps or log.steps[0].supervisor is None:
        return []
    rows: list[list[tuple[str, int, int]]] = [[] for _ in range(len(log.steps[0].supervisor))]
    for step in log.steps:
        for row, state in enumerate(step.supervisor or ()):
            spans = rows[row]
            if spans and spans[-1][0] == state.mode:
                spans[-1] = (state.mode, spans[-1][1], step.seq)
            else:
                spans.append((state.mode, step.seq, step.seq))
    return rows


def _listed(items: Sequence[str]) -> str:
    shown = ", ".join(items[:_LISTED])
    return shown + (f" and {len(items) - _LISTED} more" if len(items) > _LISTED else "")


def _when(unix_ns: int) -> str:
    moment = datetime.datetime.fromtimestamp(unix_ns / 1e9, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def weights_changes(log: FlightLog) -> list[str]:
    """Where the steps' weights differ from the previous step's (the first step from those live
    at bind): "seq N generation G" or "seq N while weights were made live"."""
    changes = []
    previous: int | str | None = log.weights_generation
    for step in log.steps:
        if step.weights_generation is None:
            return []
        now: int | str = "changing" if step.weights_changing else step.weights_generation
        if now != previous:
            what = "while weights were made live" if now == "changing" else f"generation {now}"
            changes.append(f"seq {step.seq} {what}")
        previous = now
    return changes


def describe(log: FlightLog) -> str:
    """The text ``tdaot log show`` prints."""
    guards = [name for name, on in (("envelope", log.envelope), ("supervisor", log.supervised)) if on]
    lines = [
        f"flight log {log.path}",
        f"package {log.package_path} (sha256 {log.package_sha256})",
        f"recorded on the {log.runtime} runtime, model {log.model!r}, batch {log.batch}, "
        + (f"with the {' and '.join(guards)}" if guards else "without envelope or supervisor")
        + f", bound at {_when(log.bound_at_unix_ns)}",
    ]
    if log.weights_sha256 is not None:
        changes = weights_changes(log)
        lines.append(
            f"weights at bind: sha256 {log.weights_sha256 or '(none recorded)'}, generation "
            f"{log.weights_generation}; swapped during the log: " + (_listed(changes) if changes else "no")
        )
    steps = log.steps
    if not steps:
        lines.append(f"steps: none of {log.capacity} slots holds a whole step ({log.torn} torn)")
        return "\n".join(lines) + "\n"
    seconds = (steps[-1].start_ns - steps[0].start_ns) / 1e9
    lines.append(
        f"steps: {len(steps)} whole of {log.capacity} slots, seq {steps[0].seq}..{steps[-1].seq} over "
        f"{seconds:.3f} s ({log.torn} torn, {log.unwritten} unwritten)"
        + (f"; the {steps[0].seq - 1} steps before were overwritten" if steps[0].seq > 1 else "")
    )
    gaps = log.gaps()
    lines.append(
        "gaps: " + (_listed([f"after seq {a} ({b - a - 1} missing)" for a, b in gaps]) if gaps else "none")
    )
    threw = [str(step.seq) for step in steps if step.threw]
    lines.append("threw: " + (f"{len(threw)} steps, seq " + _listed(threw) if threw else "none"))
    last = steps[-1].interventions
    first = steps[0].interventions
    lines.append(
        "interventions after the last step: "
        + ", ".join(
            f"{k} {v}" + (f" (+{v - first.get(k, 0)} in the log)" if steps[0].seq > 1 else "")
            for k, v in last.items()
        )
    )
    happened = intervention_steps(log)
    lines.append(
        "steps with interventions: "
        + (
            f"{len(happened)}: "
            + _listed([f"seq {seq} " + "+".join(k for k in grown) for seq, grown in happened])
            if happened
            else "none"
        )
    )
    resets = [
        f"seq {step.seq} rows {[int(r) for r in step.reset.nonzero().flatten()]}"
        for step in steps
        if step.reset.any()
    ]
    lines.append("resets: " + (f"{len(resets)}: " + _listed(resets) if resets else "none"))
    for row, spans in enumerate(supervisor_spans(log)):
        lines.append(
            f"supervisor row {row}: "
            + _listed([f"{mode} seq {a}..{b}" if a != b else f"{mode} seq {a}" for mode, a, b in spans])
        )
    times = step_times(log)
    lines.append("step time: " + ", ".join(f"{name} {value:.1f} us" for name, value in times.items()))
    if len(steps) > 1:
        periods = np.diff([step.start_ns for step in steps]) / 1e6
        lines.append(f"period: median {float(np.median(periods)):.3f} ms, max {float(periods.max()):.3f} ms")
    for kind in ("input", "output"):
        specs = [spec for spec in log.fields if spec.kind == kind]
        lines.append(f"{kind}s: " + ", ".join(f"{s.key} {s.dtype}{list(s.shape)}" for s in specs))
    return "\n".join(lines) + "\n"
