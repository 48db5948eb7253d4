"""Parity between the eager tensordict policy and its native artifact."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from tdaot import keys as keyutil
from tdaot.builder.export import export_context
from tdaot.builder.pipeline import Artifact
from tdaot.contract import Contract
from tdaot.runtime import NativePolicy, load

# (rtol, atol) per dtype: AOTInductor fuses and vectorises, so float results differ
# from eager by rounding; integer and bool outputs must match exactly.
DEFAULT_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
}
# The small odd batch size checked besides 1 and the example's.
ODD_BATCH = 7
# Draws per example row for assert_statistical_parity, and how many standard errors
# of the difference between two such estimates count as agreement: at 6, a correct
# artifact fails about once in 10^8 elements, while a wrong loc or scale of a few
# percent of the spread shows up at 2000 draws.
STATISTICAL_SAMPLES = 2000
STATISTICAL_Z = 6.0
# Where assert_parity runs the artifact: "torch", the full runtime in this process (tdaot.load);
# "lite", the lite runtime (tdaot::lite, no libtorch) in a tdaot-lite subprocess (tdaot.lite).
RUNTIMES = ("torch", "lite")
# A recurrent package on the lite runtime is compared over a rollout of LITE_STEPS steps, with
# every other row (row 0, 2, ...; at batch 1 the one row) reset before step LITE_RESET_STEP.
LITE_STEPS = 4
LITE_RESET_STEP = 2


@dataclass(frozen=True)
class ParityRow:
    key: str
    batch: int
    dtype: str
    max_abs: float
    max_rel: float
    rtol: float
    atol: float
    within: bool  # every element within atol + rtol * |expected|, as torch.isclose
    problem: str = ""  # a dtype or shape mismatch, else empty

    @property
    def ok(self) -> bool:
        return self.within and not self.problem


@dataclass(frozen=True)
class ParityReport:
    rows: tuple[ParityRow, ...]
    runtime: str = "torch"
    # runtime="lite": the files the tdaot-lite processes had mapped (read from their
    # /proc/self/maps after the run; none of them is a libtorch or c10 library).
    libraries: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return all(row.ok for row in self.rows)

    def table(self) -> str:
        header = ("key", "batch", "dtype", "max abs err", "max rel err", "atol", "rtol", "result")
        body = [
            (
                r.key,
                str(r.batch),
                r.dtype,
                f"{r.max_abs:.3g}",
                f"{r.max_rel:.3g}",
                f"{r.atol:.3g}",
                f"{r.rtol:.3g}",
                "ok" if r.ok else (r.problem or "MISMATCH"),
            )
            for r in self.rows
        ]
        widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
        return "\n".join(
            "  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in [header, *body]
        )

    __str__ = table


def assert_parity(
    policy: TensorDictModuleBase,
    artifact: str | os.PathLike | Artifact | NativePolicy,
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
    on ``tdaot::lite``) instead, in a ``tdaot-lite`` subprocess (:mod:`tdaot.lite`) that must
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
        from tdaot.testing_lite import assert_lite_parity

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
        inputs = _resize(example, batch)
        with export_context(manifest.interaction_type), torch.no_grad():
            expected = eager_run(policy, inputs, manifest.contract)
        actual = native(inputs)
        for spec in manifest.outputs:
            key = keyutil.td_key(keyutil.from_manifest(spec.key))
            rows.append(_compare(spec.key, batch, expected.get(key), actual.get(key), rtol, atol))
    report = ParityReport(tuple(rows))
    if not report.ok:
        raise AssertionError(
            f"native artifact {native.path!r} differs from the eager policy:\n{report.table()}"
        )
    return report


def assert_statistical_parity(
    policy: TensorDictModuleBase,
    artifact: str | os.PathLike | Artifact | NativePolicy,
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
        problem = _mismatch(exp, act)
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


def eager_run(
    policy: TensorDictModuleBase, inputs: TensorDictBase, contract: Contract | None
) -> TensorDictBase:
    """The eager policy on a copy of ``inputs``, with the deployment contract's map and clip
    applied to its inputs and outputs as the package applies them."""
    inputs = inputs.clone()
    signals = contract.inputs.items() if contract else ()
    for key, signal in signals:
        td_key = keyutil.td_key(keyutil.from_manifest(key))
        inputs.set(td_key, signal.apply(inputs.get(td_key)))
    out = policy(inputs)
    for key, signal in contract.outputs.items() if contract else ():
        td_key = keyutil.td_key(keyutil.from_manifest(key))
        out.set(td_key, signal.apply(out.get(td_key)))
    return out


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


def _mismatch(expected, actual) -> str:
    """Why two outputs cannot be compared element-wise, or ""."""
    if not isinstance(expected, torch.Tensor):
        return "eager policy lacks it"
    if actual.dtype != expected.dtype:
        return f"dtype {str(actual.dtype).replace('torch.', '')}"
    if actual.shape != expected.shape:
        return f"shape {list(actual.shape)} != {list(expected.shape)}"
    return ""


def _load(artifact) -> NativePolicy:
    if isinstance(artifact, NativePolicy):
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


def _resize(example: TensorDictBase, batch: int) -> TensorDictBase:
    rows = torch.arange(batch) % example.batch_size[0]
    return example[rows.to(example.device)].contiguous()


def _compare(name, batch, expected, actual, rtol, atol) -> ParityRow:
    default_rtol, default_atol = DEFAULT_TOLERANCES.get(getattr(expected, "dtype", None), (0.0, 0.0))
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    problem = _mismatch(expected, actual)
    dtype = str(expected.dtype).replace("torch.", "") if isinstance(expected, torch.Tensor) else "-"
    if problem:
        return ParityRow(name, batch, dtype, float("nan"), float("nan"), rtol, atol, False, problem)
    exp = expected.detach().to("cpu", torch.float64)
    act = actual.detach().to("cpu", torch.float64)
    if exp.numel() == 0:
        return ParityRow(name, batch, dtype, 0.0, 0.0, rtol, atol, True)
    # NaN or inf in the same place on both sides is agreement, not error.
    agree = (exp.isnan() & act.isnan()) | (exp == act)
    abs_err = torch.where(agree, torch.zeros_like(exp), (act - exp).abs()).nan_to_num(nan=float("inf"))
    scale = exp.abs().nan_to_num(0.0, posinf=0.0)
    rel_err = abs_err / scale.clamp_min(torch.finfo(torch.float64).tiny)
    within = bool((abs_err <= atol + rtol * scale).all())
    return ParityRow(name, batch, dtype, float(abs_err.max()), float(rel_err.max()), rtol, atol, within)
