"""A flight log replayed in pytest (``tdaot.testing.replay``) and by ``tdaot replay``: through the
package (tdaot.flight_log.replay) and, given one, the eager policy, so a log from the field
becomes a regression test.

The eager policy is fed each step's recorded inputs but the recurrent state, which it carries
from its own ``("next", k)`` outputs (seeded from the recorded state at the first step and after
a gap), with the recorded per-row resets honoured: the reset rows' state zeroed and ``is_init``
set. It runs inside the package's own export wrapper (tdaot.builder.export.PositionalPolicy):
the deployment contract's map and clip around it, and, for a package that carries the contract's
last_action and history terms itself (its ``tdaot.*`` state, tdaot.builder.carried_terms), their
slots written into the observation and the next state returned exactly as the package does, so
that state is carried, reset (zeros, a history window refilled where ``is_init`` is set) and
seeded like any other. It is compared with the recorded outputs when the recording had no
envelope and no supervisor; with them (they alter outputs by design), with the package's own
outputs bound without them on the same recorded inputs, or, without the package at hand, with the
recorded outputs of the steps they left alone."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch
from tensordict.nn import TensorDictModuleBase

from tdaot import keys as keyutil
from tdaot.builder.carried_terms import carried_terms_of, policy_keys
from tdaot.builder.export import PositionalPolicy, export_context
from tdaot.errors import FlightLogError, InvalidArgumentError
from tdaot.flight_log import FlightLog, read
from tdaot.flight_log.replay import (
    ALTERED,
    OTHER_WEIGHTS,
    THREW,
    Divergence,
    ReplayCheck,
    ReplayReport,
    first_divergence,
    package_for,
    raw_outputs,
    replay_package,
    segment_starts,
    state_keys,
    untouched,
)
from tdaot.runtime import Policy
from tdaot.testing.report import DEFAULT_TOLERANCES


def replay(
    log: FlightLog | str | os.PathLike | bytes,
    policy: TensorDictModuleBase | str | None = None,
    *,
    package: str | os.PathLike | Policy | None = None,
    weights: str | os.PathLike | None = None,
    rtol: float | None = None,
    atol: float | None = None,
) -> ReplayReport:
    """Replays the flight log ``log`` (a :class:`tdaot.flight_log.FlightLog`, a path or the
    bytes of one) through its package (``package``, else the log's ``package.path``; refused
    with :class:`tdaot.IntegrityError` naming both digests when its sha256 is not the log's, or
    when its weights are not those the log was bound with: ``weights`` is then the weight file
    that was live, swapped in first) and, when ``policy`` is given (a tensordict module, or
    ``"FILE.py:FACTORY"``), the eager policy.
    The package must reproduce the recorded outputs bit for bit (``rtol``/``atol`` relax it); the
    eager policy must agree within each dtype's parity tolerance (``rtol``/``atol`` override it).
    Raises AssertionError naming the first step, key, element and values that differ; returns
    the :class:`tdaot.flight_log.replay.ReplayReport`."""
    __tracebackhide__ = True  # a failure points at the test that asked, not at this helper
    report = replay_report(log, policy, package=package, weights=weights, rtol=rtol, atol=atol)
    if not report.ok:
        raise AssertionError(report.describe())
    return report


def replay_report(
    log: FlightLog | str | os.PathLike | bytes,
    policy: TensorDictModuleBase | str | None = None,
    *,
    package: str | os.PathLike | Policy | None = None,
    weights: str | os.PathLike | None = None,
    rtol: float | None = None,
    atol: float | None = None,
) -> ReplayReport:
    """:func:`replay` without the assertion: the report, whatever it found. The package is
    skipped (and said so) only when a policy is given and neither ``package`` nor the log's
    package path is at hand."""
    if not isinstance(log, FlightLog):
        log = read(log)
    if log.manifest is None:
        raise FlightLogError(
            f"flight log {log.path!r}: its package manifest cannot be read ({log.manifest_problem}), "
            "so its inputs cannot be replayed",
            log.path,
        )
    module = _eager_module(policy)
    native = None
    notes = []
    if package is not None or os.path.isfile(log.package_path) or module is None:
        native = package_for(log, package, weights)
    else:
        notes.append(f"package {log.package_path!r} is not here: the eager policy alone was replayed")
    checks = []
    raw = None
    if native is not None:
        check, raw = replay_package(log, native, rtol=rtol, atol=atol)
        checks.append(check)
    if module is not None:
        if (log.envelope or log.supervised) and native is not None and raw is None:
            raw = raw_outputs(log, native)
        checks.append(_replay_eager(log, module, raw, rtol, atol))
    return ReplayReport(
        log, native.path if native is not None else log.package_path, tuple(checks), tuple(notes)
    )


def _eager_module(policy) -> TensorDictModuleBase | None:
    if policy is None or isinstance(policy, torch.nn.Module):
        return policy
    if isinstance(policy, str):
        from tdaot.builder.factories import call_factory

        module, _example = call_factory(policy)
        return module
    raise InvalidArgumentError(
        f"policy={policy!r}: expected a tensordict module or 'FILE.py:FACTORY' (its factory returns "
        "(module, example))"
    )


def _replay_eager(
    log: FlightLog, module: TensorDictModuleBase, raw: list[dict[str, torch.Tensor]] | None, rtol, atol
) -> ReplayCheck:
    manifest = log.manifest
    recurrent = manifest.recurrent
    guarded = log.envelope or log.supervised
    if not guarded:
        reference = "recorded outputs"
    elif raw is not None:
        reference = "the package bound without the envelope and the supervisor"
    else:
        reference = "recorded outputs of the steps the envelope and the supervisor left alone"
    notes = []
    if guarded:
        notes.append(
            "the recording's envelope or supervisor alter outputs by design, so the eager policy is "
            "compared with the package's own outputs"
        )
    # The package's own wrapper around the eager policy: the contract's map and clip, and the
    # slots of the last_action and history terms it carries written as its build writes them.
    in_keys, out_keys = policy_keys(manifest)
    wrapper = PositionalPolicy(
        module,
        [keyutil.from_manifest(k) for k in in_keys],
        [keyutil.from_manifest(k) for k in out_keys],
        torch.Size([log.batch]),
        {},
        contract=manifest.contract,
        carry=carried_terms_of(manifest),
    )
    starts = segment_starts(log)
    carried_keys = state_keys(log)
    specs = {spec.key: spec for spec in manifest.inputs}
    carried: dict[str, torch.Tensor] = {}
    skipped = {THREW: 0, ALTERED: 0, OTHER_WEIGHTS: 0}
    compared = 0
    divergence = None
    for i, step in enumerate(log.steps):
        values = {key: value.clone() for key, value in step.inputs.items() if key not in carried_keys}
        if recurrent is not None:
            for pair in recurrent.state:
                state = step.inputs[pair.input].clone() if starts[i] else carried[pair.input].clone()
                if not starts[i]:
                    state[step.reset] = 0
                values[pair.input] = state
            if recurrent.is_init:
                spec = specs[recurrent.is_init]
                if starts[i]:
                    values[spec.key] = step.inputs[spec.key].clone()
                else:
                    flags = step.reset.view(log.batch, *[1] * len(spec.shape)).expand(log.batch, *spec.shape)
                    values[spec.key] = flags.to(spec.torch_dtype).clone()
        try:
            with export_context(manifest.interaction_type), torch.no_grad():
                produced = wrapper(*(values[spec.key] for spec in manifest.inputs))
        except KeyError as err:  # an out key the eager policy does not write: nothing to carry on with
            if not err.args or err.args[0] not in out_keys:
                raise
            why = "the eager policy does not write it"
            divergence = divergence or Divergence(i, step.seq, f"outputs/{err.args[0]}", (), "", "", why)
            break
        outputs = dict(zip((spec.key for spec in manifest.outputs), produced))
        if recurrent is not None:
            carried = {pair.input: outputs[pair.output] for pair in recurrent.state}
        if step.threw:
            skipped[THREW] += 1
            continue
        against_recorded = not (guarded and raw is not None)
        if against_recorded and log.other_weights(step):
            skipped[OTHER_WEIGHTS] += 1
            continue
        if guarded and raw is None and not untouched(log, i, starts):
            skipped[ALTERED] += 1
            continue
        compared += 1
        if divergence is None:
            expected = raw[i] if guarded and raw is not None else step.outputs
            divergence = _compare(i, step.seq, expected, outputs, rtol, atol)
    return ReplayCheck(
        "eager policy", reference, compared, skipped, False, rtol, atol, divergence, tuple(notes)
    )


def _compare(i: int, seq: int, expected: Mapping[str, torch.Tensor], actual: Mapping[str, Any], rtol, atol):
    for key, reference in expected.items():
        value = actual[key]  # the wrapper gives every output (else KeyError, above)
        default_rtol, default_atol = DEFAULT_TOLERANCES.get(reference.dtype, (0.0, 0.0))
        found = first_divergence(
            reference,
            value,
            default_rtol if rtol is None else rtol,
            default_atol if atol is None else atol,
        )
        if found is not None:
            return Divergence(i, seq, f"outputs/{key}", *found)
    return None
