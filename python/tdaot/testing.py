"""Parity between the eager tensordict policy and its native artifact."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from tdaot import keys as keyutil
from tdaot.build import Artifact
from tdaot.export import export_context
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
) -> ParityReport:
    """Asserts the native artifact matches the eager policy on every out key.

    Both run on the example's rows (repeated to fill larger batches) under the
    artifact's interaction type, for each batch size (default: 1, 7 and the
    example's, limited to the artifact's batch range). Raises AssertionError with
    a table of max abs / rel error per key and batch size; returns the report.
    """
    native = (
        artifact
        if isinstance(artifact, NativePolicy)
        else load(artifact.path if isinstance(artifact, Artifact) else artifact)
    )
    manifest = native.manifest
    if manifest.interaction_type == "random":
        raise ValueError(
            f"{native.path!r} samples inside the artifact (interaction type 'random'): "
            "outputs differ from eager by design; compare statistics instead"
        )
    if example.batch_dims == 0:
        example = example.unsqueeze(0)
    sizes = _batch_sizes(batch_sizes, example.batch_size[0], manifest.batch)
    rows = []
    for batch in sizes:
        inputs = _resize(example, batch)
        with export_context(manifest.interaction_type), torch.no_grad():
            expected = policy(inputs.clone())
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
    if not isinstance(expected, torch.Tensor):
        return ParityRow(
            name, batch, "-", float("nan"), float("nan"), rtol, atol, False, "eager policy lacks it"
        )
    dtype = str(expected.dtype).replace("torch.", "")
    if actual.dtype != expected.dtype:
        problem = f"dtype {str(actual.dtype).replace('torch.', '')}"
        return ParityRow(name, batch, dtype, float("nan"), float("nan"), rtol, atol, False, problem)
    if actual.shape != expected.shape:
        problem = f"shape {list(actual.shape)} != {list(expected.shape)}"
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
