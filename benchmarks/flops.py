"""How far each policy runs from the physical limit: its floating-point operations per sample,
this core's measured fp32 FMA peak, and the achieved GFLOP/s table of `make bench`.

- FLOPs per sample (``flops_per_sample``, in artifacts.py's info.json): torch's FlopCounterMode
  over the policy's exported program at batch 8, recurrent layers decomposed into the matmuls
  they compute (the counter has no formula for aten.lstm); a multiply-add counts 2. Pointwise
  ops are not counted, so the floor is the matrix products' and convolutions'.
- Peak (``measure_peak``): benchmarks/cpp/fma_peak.c, built with -march=native, pinned to the
  timed CPU, run before and after the timing rounds; the best of its repeats, in thread CPU
  time, so other load on a shared machine does not lower it.
- Table (``roofline_table``): per policy and batch, p50 of tdaot native and of the fastest
  runtime as GFLOP/s, beside the peak, and tdaot's p50 over the floor (FLOPs / peak).
- Table (``peak_fraction_table``): at the largest batch of the one-process stage (4096), the
  fraction of the peak each runtime reaches (FLOPs of the call / p50 / peak), every runtime timed
  in the same process (benchmarks/alternate.py), so the fractions compare side by side.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

FLOP_BATCH = 8


def flops_per_sample(policy, example, interaction_type: str) -> float:
    """Floating-point operations of one sample of ``policy`` (matrix products and convolutions)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from tdaot import _torch_compat
    from tdaot.builder.export import export_context, export_policy
    from tdaot.builder.tuning import RECURRENT_OPS

    exported = export_policy(policy, example, batch=FLOP_BATCH, interaction_type=interaction_type)
    program = _torch_compat.decompose(exported.program, RECURRENT_OPS)
    args = program.example_inputs[0]
    counter = FlopCounterMode(display=False)
    with export_context(interaction_type), torch.no_grad(), counter:
        program.module()(*args)
    return counter.get_total_flops() / FLOP_BATCH


def measure_peak(tool: Path, preexec_fn=None) -> dict | None:
    """The FMA peak tool's JSON ({"gflops", "isa", "seconds"}), or None where it is not built."""
    if not tool.exists():
        return None
    result = subprocess.run([str(tool)], capture_output=True, text=True, preexec_fn=preexec_fn)
    if result.returncode != 0:
        return {"error": (result.stderr.strip() or "failed")[-300:]}
    return json.loads(result.stdout)


def peak_gflops(context: dict) -> float | None:
    """The best peak of the run (measured before and after the rounds)."""
    peaks = [p.get("gflops") for p in context.get("fma_peak", []) if p and "gflops" in p]
    return max(peaks) if peaks else None


def roofline_table(results: dict) -> list[str]:
    """Markdown: achieved GFLOP/s (p50) per policy and batch, fastest runtime and tdaot native."""
    peak = peak_gflops(results["context"])
    flops = {p: info.get("flops_per_sample") for p, info in results["policies"].items()}
    if peak is None or not any(flops.values()):
        return []
    native, labels = results["native"], results["runtimes"]
    isa = next((p.get("isa") for p in results["context"]["fma_peak"] if p and "isa" in p), "?")
    lines = [
        f"## Achieved GFLOP/s (p50) against this core's fp32 FMA peak, {peak:.1f} GFLOP/s ({isa})",
        "",
        "FLOPs per sample: matrix products and convolutions (a multiply-add is 2), from torch's "
        "FlopCounterMode on the exported program. floor = FLOPs / peak; tdaot/floor = tdaot native's "
        "p50 over it (1.00 would be the peak).",
        "",
        "| policy | FLOPs/sample | batch | fastest runtime | its GFLOP/s | tdaot native GFLOP/s "
        "| % of peak | floor | tdaot/floor |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for policy, per_sample in flops.items():
        if not per_sample:
            continue
        rows = [t for t in results["timing"] if t["policy"] == policy]
        for batch in sorted({t["batch"] for t in rows}):
            at = {t["runtime"]: t for t in rows if t["batch"] == batch}
            total = per_sample * batch
            fastest = min(at, key=lambda r: at[r]["p50_us"])
            ours = at.get(native)

            def gflops(t, total=total):
                return total / (t["p50_us"] * 1e3)

            floor_us = total / (peak * 1e3)
            cells = [
                policy,
                _si(per_sample),
                str(batch),
                labels.get(fastest, fastest),
                f"{gflops(at[fastest]):.1f}",
                f"{gflops(ours):.1f}" if ours else "–",
                f"{100 * gflops(ours) / peak:.0f} %" if ours else "–",
                f"{floor_us:.2f} µs" if floor_us < 1000 else f"{floor_us / 1e3:.2f} ms",
                f"{ours['p50_us'] / floor_us:.2f}x" if ours else "–",
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


# The runtimes of the one-process stage, in its table's order (benchmarks/alternate.py).
FRACTION_RUNTIMES = {
    "onnxruntime": "ONNX Runtime",
    "openvino": "OpenVINO",
    "executorch": "ExecuTorch",
    "aoti": "AOTI loader",
    "tdaot": "tdaot",
}


def peak_fractions(row: dict, per_sample: float, peak: float) -> dict[str, float]:
    """Each runtime's fraction of ``peak`` (GFLOP/s) in one alternate.py row: the call's FLOPs
    (``per_sample`` x its batch) over its p50, over the peak."""
    total = per_sample * row["batch"]
    return {
        name: total / (row["p50_us"][name] * 1e3) / peak
        for name in FRACTION_RUNTIMES
        if name in row["p50_us"]
    }


def peak_fraction_table(results: dict) -> list[str]:
    """Markdown: per policy, at the one-process stage's largest batch, each runtime's fraction of
    the FMA peak (issue 54, item 3)."""
    peak = peak_gflops(results["context"])
    rows = results.get("alternation") or []
    if peak is None or not rows:
        return []
    batch = max(r["batch"] for r in rows)
    isa = next((p.get("isa") for p in results["context"]["fma_peak"] if p and "isa" in p), "?")
    lines = [
        f"## Fraction of the FMA peak at {batch} rows, every runtime "
        f"(one process; peak {peak:.1f} GFLOP/s, {isa})",
        "",
        "FLOPs of the call (matrix products and convolutions, a multiply-add is 2) over its p50 in the "
        "one-process stage, over this core's fp32 FMA peak (`tdaot-bench-fma-peak`: one core, every FMA "
        "pipe busy on the widest vectors: cores x FMA pipes x lanes x 2 x clock). Pointwise work "
        "(activations, casts) is not counted, so no runtime can reach 100 %.",
        "",
        "| policy | FLOPs/sample | " + " | ".join(FRACTION_RUNTIMES.values()) + " |",
        "|---|---:|" + "---:|" * len(FRACTION_RUNTIMES),
    ]
    for row in rows:
        per_sample = results["policies"].get(row["policy"], {}).get("flops_per_sample")
        if row["batch"] != batch or not per_sample:
            continue
        fractions = peak_fractions(row, per_sample, peak)
        cells = [f"{100 * fractions[n]:.0f} %" if n in fractions else "–" for n in FRACTION_RUNTIMES]
        lines.append(f"| {row['policy']} | {_si(per_sample)} | " + " | ".join(cells) + " |")
    return lines + [""]


def _si(value: float) -> str:
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value:.0f}"
