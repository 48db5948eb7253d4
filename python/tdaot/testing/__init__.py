"""Parity between the eager tensordict policy and its native artifact.

``assert_parity`` and ``assert_statistical_parity`` check the full runtime in this process;
``assert_parity(..., runtime="lite")`` the lite runtime (:mod:`tdaot.testing.lite_parity`),
through the ``tdaot-lite`` subprocess harness :mod:`tdaot.testing.lite_runner`. ``replay``
re-runs a flight log through its package and the eager policy
(:mod:`tdaot.testing.flight_replay`), so a log from the field becomes a regression test.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from tdaot import keys as keyutil
from tdaot.builder.export import export_context
from tdaot.builder.pipeline import Artifact
from tdaot.runtime import Policy, load
from tdaot.testing.flight_replay import replay
from tdaot.testing.lite_parity import assert_lite_parity
from tdaot.testing.report import (
    DEFAULT_TOLERANCES,
    LITE_RESET_STEP,
    LITE_STEPS,
    ODD_BATCH,
    RUNTIMES,
    ParityReport,
    ParityRow,
    compare,
    eager_run,
    mismatch,
    resize,
)

# Draws per example row for assert_statistical_parity, and how many standard errors
# of the difference between two such estimates count as agreement: at 6, a correct
# artifact fails about once in 10^8 elements, while a wrong loc or scale of a few
# percent of the spread shows up at 2000 draws.
STATISTICAL_SAMPLES = 2000
STATISTICAL_Z = 6.0


def assert_parity(
    policy: TensorDictModuleBase,
    artifact: str | os.PathLike | Artifact | Policy,
    example: TensorDictBase,
    *,
    batch_sizes: Sequence[int] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    runtime: str = "torch",
) -> ParityReport:
    """Asserts the native artifact matches the eager policy on every out key.

    Both run on the example's rows (repeated to fill larger batches) under the
    artifact's interaction type, for each batch size (default: 1, 7 and the
    example's, limited to the artifact's batch range). A package built with a deployment
    contract is compared with the eager policy inside the same map and clip (:func:`eager_run`).
    Raises AssertionError with a table of max abs / rel error per key and batch size; returns
    the report.

    ``runtime="lite"`` runs the package's lite models (the models its manifest records as running
    on ``tdaot::lite``) instead, in a ``tdaot-lite`` subprocess (:mod:`tdaot.testing.lite_runner`) that must
    have no libtorch or c10 library mapped (read from its ``/proc/self/maps``; AssertionError
    naming them otherwise), at the batch sizes those models serve (default: each lite model's;
    ``batch_sizes`` must be among them). A recurrent package is compared over a rollout of
    LITE_STEPS steps, the lite runtime carrying its own state, the eager policy stepped the same
    way (state from its previous step's ("next", k), zeros and is_init on reset rows), with rows
    reset before step LITE_RESET_STEP. ValueError when the package has no lite model.
    """
    __tracebackhide__ = True  # a failure points at the test that asked, not at this helper
    if runtime not in RUNTIMES:
        raise ValueError(
            f"runtime={runtime!r}: expected 'torch' (the full runtime, in this process) or 'lite' "
            "(the lite runtime, no libtorch, in a tdaot-lite subprocess)"
        )
    if runtime == "lite":
        return assert_lite_parity(policy, artifact, example, batch_sizes, rtol, atol)
    native = _load(artifact)
    manifest = native.manifest
    if manifest.interaction_type == "random":
        raise ValueError(
            f"{native.path!r} samples inside the artifact (interaction type 'random'): "
            "outputs differ from eager by design; check it with assert_statistical_parity"
        )
    if example.batch_dims == 0:
        example = example.unsqueeze(0)
    sizes = _batch_sizes(batch_sizes, example.batch_size[0], manifest.batch)
    rows = []
    for batch in sizes:
        inputs = resize(example, batch)
        with export_context(manifest.interaction_type), torch.no_grad():
            expected = eager_run(policy, inputs, manifest.contract)
        actual = native(inputs)
        for spec in manifest.outputs:
            key = keyutil.td_key(keyutil.from_manifest(spec.key))
            rows.append(compare(spec.key, batch, expected.get(key), actual.get(key), rtol, atol))
    report = ParityReport(tuple(rows))
    if not report.ok:
        raise AssertionError(
            f"native artifact {native.path!r} differs from the eager policy:\n{report.table()}"
        )
    return report


def assert_statistical_parity(
    policy: TensorDictModuleBase,
    artifact: str | os.PathLike | Artifact | Policy,
    example: TensorDictBase,
    *,
    samples: int = STATISTICAL_SAMPLES,
    z: float = STATISTICAL_Z,
) -> ParityReport:
    """Asserts a sampling artifact (interaction type 'random') draws like the eager policy.

    Each example row is repeated ``samples`` times and run once natively and once
    eagerly (under 'random'), so both draw ``samples`` outputs per row. For every out
    key and element, the mean and the standard deviation over the draws must agree
    within ``z`` standard errors of their difference, plus the dtype's parity
    tolerance (so outputs that do not depend on the draw, such as a distribution's
    loc, must match as in assert_parity). Integer and bool outputs (a categorical
    action) are compared as numbers, so a one-hot action's mean is the probability
    of each choice. Raises AssertionError with a table per key and statistic.
    """
    __tracebackhide__ = True  # a failure points at the test that asked, not at this helper
    native = _load(artifact)
    manifest = native.manifest
    if manifest.interaction_type != "random":
        raise ValueError(
            f"{native.path!r} has interaction type {manifest.interaction_type!r}, not 'random': "
            "it is deterministic, so check it with assert_parity"
        )
    if example.batch_dims == 0:
        example = example.unsqueeze(0)
    rows = example.batch_size[0]
    if rows * samples not in manifest.batch:
        raise ValueError(
            f"{rows} example rows x {samples} samples = {rows * samples} is outside the artifact's batch "
            f"range [{manifest.batch.min}, {manifest.batch.max}]; pass fewer samples or example rows"
        )
    inputs = example[torch.arange(rows).repeat_interleave(samples).to(example.device)].contiguous()
    with export_context("random"), torch.no_grad():
        expected = eager_run(policy, inputs, manifest.contract)
    actual = native(inputs)
    report_rows = []
    for spec in manifest.outputs:
        key = keyutil.td_key(keyutil.from_manifest(spec.key))
        exp, act = expected.get(key, None), actual.get(key)
        problem = mismatch(exp, act)
        if problem:
            report_rows.append(
                ParityRow(spec.key, samples, spec.dtype, float("nan"), float("nan"), 0.0, 0.0, False, problem)
            )
            continue
        rtol, atol = DEFAULT_TOLERANCES.get(exp.dtype, (0.0, 0.0))
        exp_stats = _draw_statistics(exp, rows, samples)
        act_stats = _draw_statistics(act, rows, samples)
        for stat in ("mean", "std"):
            error = (act_stats[stat] - exp_stats[stat]).abs()
            spread = (exp_stats[f"{stat}_se"] ** 2 + act_stats[f"{stat}_se"] ** 2).sqrt()
            bound = z * spread + atol + rtol * exp_stats[stat].abs()
            worst = int((error - bound).flatten().argmax()) if error.numel() else 0
            report_rows.append(
                ParityRow(
                    key=f"{spec.key} ({stat})",
                    batch=samples,
                    dtype=spec.dtype,
                    max_abs=float(error.max()) if error.numel() else 0.0,
                    max_rel=float((error / bound.clamp_min(1e-300)).max()) if error.numel() else 0.0,
                    rtol=0.0,
                    atol=float(bound.flatten()[worst]) if error.numel() else 0.0,
                    within=bool((error <= bound).all()),
                )
            )
    report = ParityReport(tuple(report_rows))
    if not report.ok:
        raise AssertionError(
            f"native artifact {native.path!r} does not sample like the eager policy "
            f"({samples} draws per example row; atol is the allowed difference at the worst element, "
            f"max rel err the largest share of it used):\n{report.table()}"
        )
    return report


def _draw_statistics(values: torch.Tensor, rows: int, samples: int) -> dict[str, torch.Tensor]:
    """Mean and std over the draws of each row, and their standard errors."""
    x = values.detach().to("cpu", torch.float64).reshape(rows, samples, *values.shape[1:])
    mean = x.mean(1)
    centred = x - mean.unsqueeze(1)
    var = centred.pow(2).mean(1)
    std = var.sqrt()
    fourth = centred.pow(4).mean(1)
    # Delta method: Var(s) ~ (m4 - s^4) / (4 s^2 n), valid for any distribution with a
    # fourth moment (a Bernoulli one-hot entry as well as a Normal action).
    std_se = ((fourth - var.pow(2)).clamp_min(0) / samples).sqrt() / (2 * std).clamp_min(1e-12)
    return {"mean": mean, "mean_se": (var / samples).sqrt(), "std": std, "std_se": std_se}


def _load(artifact) -> Policy:
    if isinstance(artifact, Policy):
        return artifact
    return load(artifact.path if isinstance(artifact, Artifact) else artifact)


def _batch_sizes(requested, example_batch: int, batch_range) -> list[int]:
    if requested is not None:
        sizes = list(requested)
        outside = [b for b in sizes if b not in batch_range]
        if outside:
            raise ValueError(
                f"batch sizes {outside} are outside the artifact's batch range "
                f"[{batch_range.min}, {batch_range.max}]"
            )
        return sizes
    candidates = (1, ODD_BATCH, example_batch) if batch_range.dynamic else (batch_range.min,)
    return [b for b in dict.fromkeys(candidates) if b in batch_range]


__all__ = [
    "DEFAULT_TOLERANCES",
    "LITE_RESET_STEP",
    "LITE_STEPS",
    "ODD_BATCH",
    "RUNTIMES",
    "STATISTICAL_SAMPLES",
    "STATISTICAL_Z",
    "ParityReport",
    "ParityRow",
    "assert_parity",
    "assert_statistical_parity",
    "eager_run",
    "replay",
]
