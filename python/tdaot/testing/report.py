"""The parity report and comparison that tdaot.testing's checks share: the full runtime's
(tdaot.testing) and the lite runtime's (tdaot.testing.lite_parity)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from tdaot import keys as keyutil
from tdaot.contract import Contract

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
# Where assert_parity runs the artifact: "torch", the full runtime in this process (tdaot.load);
# "lite", the lite runtime (tdaot::lite, no libtorch) in a tdaot-lite subprocess (tdaot.testing.lite_runner).
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


def mismatch(expected, actual) -> str:
    """Why two outputs cannot be compared element-wise, or ""."""
    if not isinstance(expected, torch.Tensor):
        return "eager policy lacks it"
    if actual.dtype != expected.dtype:
        return f"dtype {str(actual.dtype).replace('torch.', '')}"
    if actual.shape != expected.shape:
        return f"shape {list(actual.shape)} != {list(expected.shape)}"
    return ""


def resize(example: TensorDictBase, batch: int) -> TensorDictBase:
    rows = torch.arange(batch) % example.batch_size[0]
    return example[rows.to(example.device)].contiguous()


def compare(name, batch, expected, actual, rtol, atol) -> ParityRow:
    default_rtol, default_atol = DEFAULT_TOLERANCES.get(getattr(expected, "dtype", None), (0.0, 0.0))
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    problem = mismatch(expected, actual)
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
