"""Batch-1 latency of one policy across runtimes, measured side by side in one run.

Runtimes: the eager TensorDictModule, AOTInductor's own Python loader
(torch._inductor.aoti_load_package), tdaot through the bindings (TensorDict in/out,
and the positional path), and tdaot native (`tdaot-run bench`, a C++ loop).
Rounds alternate between runtimes so machine drift hits all of them alike; one
intra-op thread everywhere. Python runtimes pool their samples over all rounds;
tdaot-run reports percentiles per round, and the median round is shown.

    .venv/bin/python benchmarks/latency.py [--iters N] [--rounds R]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples.policies import tutorial_policy  # noqa: E402

import tdaot  # noqa: E402
from tdaot.export import export_context  # noqa: E402

NATIVE = "tdaot native (C++)"


def percentiles(samples_ns: list[int]) -> dict[str, float]:
    ordered = sorted(samples_ns)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1e3

    return {"p50_us": at(0.5), "p99_us": at(0.99), "p999_us": at(0.999), "max_us": ordered[-1] / 1e3}


def time_calls(call, iters: int) -> list[int]:
    samples = []
    for _ in range(iters):
        start = time.perf_counter_ns()
        call()
        samples.append(time.perf_counter_ns() - start)
    return samples


def python_runtimes(policy, package: str):
    obs = torch.randn(1, 3)
    native = tdaot.load(package)
    example = tutorial_policy()[1][:1]
    aoti = torch._inductor.aoti_load_package(package)

    def eager():
        with export_context("deterministic"), torch.no_grad():
            policy(example.clone())

    return {
        "eager TensorDictModule": eager,
        "AOTI Python loader": lambda: aoti(obs),
        "tdaot Python (TensorDict)": lambda: native(example),
        "tdaot Python (positional)": lambda: native.run_positional(obs),
    }


def native_round(tdaot_run: str, package: str, iters: int) -> dict[str, float]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [tdaot_run, "bench", package, "--batch", "1", "--iters", str(iters), "--threads", "1", "--json"]
    result = json.loads(subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout)
    return {k: result[k] for k in ("p50_us", "p99_us", "p999_us", "max_us")}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iters", type=int, default=2000, help="calls per runtime per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tdaot-run", default=str(ROOT / "build/cpp/tdaot-run"))
    parser.add_argument("--package", default=str(ROOT / "build/bench/tutorial.pt2"))
    parser.add_argument("--results", default=str(ROOT / "benchmarks/results"))
    args = parser.parse_args()

    torch.set_num_threads(1)
    policy, example = tutorial_policy()
    artifact = tdaot.build(policy, example, args.package)
    runtimes = python_runtimes(policy, artifact.path)
    for call in runtimes.values():  # warm-up: first calls allocate and page in code
        time_calls(call, 200)

    pooled: dict[str, list[int]] = {name: [] for name in runtimes}
    native_rounds = []
    for _ in range(args.rounds):
        for name, call in runtimes.items():
            pooled[name].extend(time_calls(call, args.iters))
        native_rounds.append(native_round(args.tdaot_run, artifact.path, args.iters))

    rows = {name: percentiles(samples) for name, samples in pooled.items()}
    rows[NATIVE] = {k: statistics.median(r[k] for r in native_rounds) for k in native_rounds[0]}
    rows[NATIVE]["max_us"] = max(r["max_us"] for r in native_rounds)
    base = rows[NATIVE]["p50_us"]
    for row in rows.values():
        row["p50_ratio_vs_native"] = row["p50_us"] / base

    header = f"{'runtime':<28}{'p50 us':>9}{'p99 us':>9}{'p99.9 us':>10}{'max us':>9}{'p50 / native':>14}"
    lines = [header] + [
        f"{name:<28}{r['p50_us']:>9.1f}{r['p99_us']:>9.1f}{r['p999_us']:>10.1f}{r['max_us']:>9.1f}"
        f"{r['p50_ratio_vs_native']:>13.2f}x"
        for name, r in rows.items()
    ]
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    context = (
        f"tutorial policy, batch 1, 1 thread, {args.rounds} rounds x {args.iters} calls, {stamp}, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}"
    )
    print(context)
    print("\n".join(lines))
    out = Path(args.results)
    out.mkdir(parents=True, exist_ok=True)
    (out / "latency.json").write_text(json.dumps({"context": context, "rows": rows}, indent=2) + "\n")
    (out / "latency.md").write_text(f"{context}\n\n```\n" + "\n".join(lines) + "\n```\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
