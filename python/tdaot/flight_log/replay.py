"""A flight log's recorded inputs run through its package again (``tdaot replay``), and the first
step and key where what comes out differs from what was recorded.

Bound as recorded (the same batch and weights, the envelope and the supervisor when the log had
them), a replay of a log that holds the run from its first step reproduces every output bit for
bit: the envelope's and the supervisor's state evolve from bind exactly as they did. A log whose
first steps the ring overwrote (or with torn slots) cannot rebuild that state, so its package is
bound without them and only the steps they left alone are compared (the counts and flags say
which). A recurrent package's state is seeded from the recorded state at the first step (and
after a gap) and then carried by the binding; the recorded state of every later step is
compared with it. Steps that ran weights swapped in after bind are run but not compared. The
eager policy's replay is tdaot.testing's (tdaot.testing.flight_replay)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from tdaot.contract_supervisor import Supervisor
from tdaot.errors import FlightLogError, IntegrityError, TdaotError
from tdaot.flight_log.model import ENVELOPE_KINDS, SUPERVISOR_KINDS, FlightLog, Step
from tdaot.runtime import Policy, load

#: Why a replay runs a step but does not compare it (ReplayCheck.skipped's keys).
THREW = "threw when recorded"
ALTERED = "altered by the envelope or supervisor"
OTHER_WEIGHTS = "ran weights swapped in after bind"


@dataclass(frozen=True)
class Divergence:
    """The first element beyond tolerance: at ``step`` (its index in the log) of ``seq``, key
    ``key`` ("outputs/action", "inputs/hidden" for carried state), element ``index`` (row first);
    ``expected`` (the reference's value) against ``actual``."""

    step: int
    seq: int
    key: str
    index: tuple[int, ...]
    expected: float | int | bool | str
    actual: float | int | bool | str
    problem: str = ""

    def describe(self) -> str:
        if self.problem:
            return f"step {self.step} (seq {self.seq}), {self.key}: {self.problem}"
        where = "[" + ", ".join(str(i) for i in self.index) + "]"
        return (
            f"step {self.step} (seq {self.seq}), {self.key}{where}: expected {self.expected!r}, "
            f"got {self.actual!r}"
        )


@dataclass(frozen=True)
class ReplayCheck:
    """One comparison of a replay: ``name`` ("package", "eager"), against ``reference`` (what it
    was compared with, in words), ``compared`` steps, the steps ``skipped`` by reason, the
    tolerance (``exact``: bit for bit) and the first ``divergence`` or None."""

    name: str
    reference: str
    compared: int
    skipped: Mapping[str, int]
    exact: bool
    rtol: float | None
    atol: float | None
    divergence: Divergence | None = None
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.divergence is None

    def describe(self) -> str:
        tolerance = "bit for bit" if self.exact else _tolerance(self.rtol, self.atol)
        head = f"{self.name} vs {self.reference}: "
        if self.divergence is not None:
            text = head + f"DIVERGES ({tolerance}) at {self.divergence.describe()}"
        else:
            text = head + f"agree {tolerance} over {self.compared} steps"
        skipped = ", ".join(f"{n} {why}" for why, n in self.skipped.items() if n)
        if skipped:
            text += f" (skipped: {skipped})"
        return "\n".join([text, *(f"  {note}" for note in self.notes)])


def _tolerance(rtol, atol) -> str:
    if rtol is None and atol is None:
        return "within each dtype's parity tolerance"
    shown = ["default" if v is None else f"{v:g}" for v in (rtol, atol)]
    return f"within rtol {shown[0]}, atol {shown[1]}"


@dataclass(frozen=True)
class ReplayReport:
    """What a replay found: the log, and one :class:`ReplayCheck` per comparison."""

    log: FlightLog
    package: str
    checks: tuple[ReplayCheck, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    def describe(self) -> str:
        steps = self.log.steps
        span = f"seq {steps[0].seq}..{steps[-1].seq}" if steps else "no steps"
        lines = [f"replay of {self.log.path}: {len(steps)} steps ({span}), batch {self.log.batch}"]
        lines += [f"  {note}" for note in self.notes]
        lines += [check.describe() for check in self.checks]
        lines.append("agree" if self.ok else "DIVERGE")
        return "\n".join(lines)

    __str__ = describe


def first_divergence(
    expected: torch.Tensor, actual: torch.Tensor, rtol: float | None, atol: float | None
) -> tuple[tuple[int, ...], object, object] | None:
    """(index, expected value, actual value) of the first element of ``actual`` beyond
    ``atol + rtol * |expected|`` (NaN agrees with NaN), or None. Both None: bit for bit (the
    bytes, so -0.0 differs from 0.0 and NaN payloads count)."""
    if expected.shape != actual.shape or expected.dtype != actual.dtype:
        return (), f"{expected.dtype} {list(expected.shape)}", f"{actual.dtype} {list(actual.shape)}"
    exp, act = expected.detach().cpu().contiguous(), actual.detach().cpu().contiguous()
    if rtol is None and atol is None:
        width = exp.element_size()
        a = exp.reshape(-1).view(torch.uint8).reshape(-1, width)
        b = act.reshape(-1).view(torch.uint8).reshape(-1, width)
        bad = (a != b).any(dim=1)
    elif exp.is_floating_point():
        close = torch.isclose(act.double(), exp.double(), rtol=rtol or 0.0, atol=atol or 0.0, equal_nan=True)
        bad = ~close.reshape(-1)
    else:
        bad = (exp != act).reshape(-1)
    if not bool(bad.any()):
        return None
    flat = int(bad.nonzero()[0])
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), exp.shape)) if exp.dim() else ()
    return index, exp.reshape(-1)[flat].item(), act.reshape(-1)[flat].item()


def state_keys(log: FlightLog) -> set[str]:
    """The recurrent state inputs and is_init of the log's package (none without a manifest)."""
    recurrent = log.manifest.recurrent if log.manifest is not None else None
    if recurrent is None:
        return set()
    return {pair.input for pair in recurrent.state} | ({recurrent.is_init} if recurrent.is_init else set())


def segment_starts(log: FlightLog) -> list[bool]:
    """Per step: whether it starts a run of consecutive seqs (the first step, after a gap)."""
    return [i == 0 or step.seq != log.steps[i - 1].seq + 1 for i, step in enumerate(log.steps)]


def untouched(log: FlightLog, index: int, starts: Sequence[bool]) -> bool:
    """Whether the envelope and the supervisor left step ``index``'s outputs as the package made
    them: no flag, no count grown since the previous step and every row's supervisor running. A
    step that starts a segment with a supervisor is not known (its counts have no previous)."""
    step = log.steps[index]
    if step.nonfinite or step.rate_limited:
        return False
    if not log.supervised:
        return True
    if starts[index] or any(row.mode != "running" for row in step.supervisor or ()):
        return False
    before = log.steps[index - 1].interventions
    kinds = (*ENVELOPE_KINDS, *SUPERVISOR_KINDS)
    return all(step.interventions.get(k, 0) == before.get(k, 0) for k in kinds)


def package_for(
    log: FlightLog,
    package: str | os.PathLike | Policy | None,
    weights: str | os.PathLike | None = None,
) -> Policy:
    """The package a replay runs: ``package`` (a path or a loaded Policy), else the log's own
    ``package.path``, with the weight file ``weights`` swapped in when given; IntegrityError
    naming both digests when it is not the recorded package, or when its live weights are not
    those the log was bound with."""
    if isinstance(package, Policy):
        policy = package
    else:
        path = os.fspath(package) if package is not None else log.package_path
        if package is None and not os.path.isfile(path):
            raise FlightLogError(
                f"flight log {log.path!r} was recorded with package {path!r}, which is not here: "
                "give the package (--package PKG, package=)",
                log.path,
            )
        policy = load(path)
    if policy.sha256 != log.package_sha256:
        raise IntegrityError(
            f"package {policy.path!r} has sha256 {policy.sha256}, the flight log {log.path!r} was "
            f"recorded with {log.package_sha256}: replay it with the package it was recorded with",
            policy.path,
        )
    if weights is not None:
        policy.swap_weights(weights)
    if log.weights_sha256 is not None and policy.weights_sha256 != log.weights_sha256:
        given = f"weight file {os.fspath(weights)!r}" if weights is not None else f"package {policy.path!r}"
        recorded, live = log.weights_sha256 or "(none recorded)", policy.weights_sha256 or "(none recorded)"
        raise IntegrityError(
            f"the flight log {log.path!r} was bound with weights sha256 {recorded}, the {given} has "
            f"weights sha256 {live}: give the weight file that was live (--weights FILE, weights=)",
            os.fspath(weights) if weights is not None else policy.path,
        )
    return policy


def bound_supervisor(log: FlightLog) -> Supervisor | bool:
    """The supervisor a replay bound as recorded runs: the one the log's header names (the
    contract's or one given at bind), else (a log from before it was named) the contract's when
    the log was supervised."""
    if log.supervisor is not None:
        return Supervisor.from_dict(log.supervisor, f"flight log {log.path!r}: supervisor")
    return log.supervised


def replay_package(
    log: FlightLog, policy: Policy, *, rtol: float | None = None, atol: float | None = None
) -> tuple[ReplayCheck, list[dict[str, torch.Tensor]] | None]:
    """The package check of a replay, and the package's raw outputs per step (bound without the
    envelope and the supervisor, each step on its recorded inputs) when those are what the check
    compared; None when it replayed as recorded."""
    if rtol is not None or atol is not None:  # one given: the other is 0 (bit for bit by default)
        rtol, atol = rtol or 0.0, atol or 0.0
    if not log.steps:
        return ReplayCheck(
            "package", "recorded outputs", 0, {}, rtol is None and atol is None, rtol, atol
        ), None
    starts = segment_starts(log)
    contract = policy.contract
    contract_supervisor = contract is not None and contract.supervisor is not None
    notes = []
    if log.runtime != "full":
        notes.append(
            f"recorded on the {log.runtime} runtime, replayed on the full runtime (the same model library)"
        )
    # A log that names its supervisor rebuilds it, whichever it was; an older one only the contract's.
    known_supervisor = log.supervisor is not None or log.supervised == contract_supervisor
    as_recorded = not (log.envelope or log.supervised) or (
        log.steps[0].seq == 1 and not any(starts[1:]) and known_supervisor
    )
    if as_recorded:
        binding = policy.bind(log.batch, envelope=log.envelope, supervisor=bound_supervisor(log))
        guards = " and ".join(
            n for n, on in (("envelope", log.envelope), ("supervisor", log.supervised)) if on
        )
        if guards:
            notes.append(f"bound as recorded, with the {guards} (the log holds the run from its first step)")
    else:
        binding = policy.bind(log.batch, envelope=False, supervisor=False)
        why = (
            "a supervisor other than the contract's"
            if not known_supervisor
            else "its first steps overwritten"
            if log.steps[0].seq != 1
            else "steps missing (torn slots)"
        )
        notes.append(
            f"the log has {why}, so the envelope's and the supervisor's state cannot be rebuilt: bound "
            "without them, compared on the steps they left alone"
        )
    if binding.model != log.model:
        notes.append(f"recorded on model {log.model!r}, replayed on {binding.model!r}")
    exact = rtol is None and atol is None
    carried = state_keys(log)
    skipped = {THREW: 0, ALTERED: 0, OTHER_WEIGHTS: 0}
    compared = 0
    raw: list[dict[str, torch.Tensor]] | None = None if as_recorded else []
    divergence = None
    resettable = bool(carried) or (as_recorded and (log.envelope or log.supervised))
    for i, step in enumerate(log.steps):
        if step.reset.any() and resettable:
            binding.reset(step.reset.clone())
        # The state the binding carried from a step that ran other weights is not the recorded one.
        carried_known = as_recorded and not starts[i] and not log.other_weights(log.steps[i - 1])
        for key, value in step.inputs.items():
            if key in carried and carried_known and divergence is None:
                found = first_divergence(value, binding.inputs[key], rtol, atol)
                if found is not None:
                    divergence = Divergence(i, step.seq, f"inputs/{key}", *found)
            binding.inputs[key].copy_(value)
        try:
            binding.run()
        except TdaotError as err:
            if not step.threw and divergence is None:
                divergence = Divergence(i, step.seq, "run", (), "", "", f"the replay raised {err}")
        if raw is not None:
            raw.append({key: binding.outputs[key].clone() for key in log.output_keys})
        if step.threw:
            skipped[THREW] += 1
            continue
        if log.other_weights(step):
            skipped[OTHER_WEIGHTS] += 1
            continue
        if not as_recorded and not untouched(log, i, starts):
            skipped[ALTERED] += 1
            continue
        compared += 1
        if divergence is None:
            divergence = _compare_outputs(i, step, binding.outputs, rtol, atol)
    reference = "recorded outputs"
    return ReplayCheck(
        "package", reference, compared, skipped, exact, rtol, atol, divergence, tuple(notes)
    ), raw


def _compare_outputs(i: int, step: Step, outputs, rtol, atol) -> Divergence | None:
    for key, recorded in step.outputs.items():
        found = first_divergence(recorded, outputs[key], rtol, atol)
        if found is not None:
            return Divergence(i, step.seq, f"outputs/{key}", *found)
    return None


def raw_outputs(log: FlightLog, policy: Policy) -> list[dict[str, torch.Tensor]]:
    """The package's outputs for each step's recorded inputs, bound without the envelope and the
    supervisor (what the eager policy is compared with when the recording had them)."""
    binding = policy.bind(log.batch, envelope=False, supervisor=False)
    outputs = []
    for step in log.steps:
        for key, value in step.inputs.items():
            binding.inputs[key].copy_(value)
        try:
            binding.run()
        except TdaotError:  # a step that threw: its outputs are what the buffers held
            pass
        outputs.append({key: binding.outputs[key].clone() for key in log.output_keys})
    return outputs
