"""What ``exact_math=True`` costs: the same policy built with and without it, called in turn.

    .venv/bin/python benchmarks/exact_math.py [--policies mlp,lstm] [--batches 1,64,1024]
                                              [--cpu-target x86-64-v3] [--seconds 6] [--json OUT]

Both packages of a policy are built here (tuning "auto", the default; through the artifact cache,
so a second run compiles nothing) for ``--cpu-target`` (default x86-64-v3: AVX2 kernels, where the
3.5-ulp tanh and the padded narrow products apply), loaded in this one process with one intra-op
thread, and called one at a time in alternation (a fresh random order every turn), so a VM's drift
falls on both alike. Prints each one's median call time (Python ``run_positional``, so batch 1 is
mostly the binding's own overhead) and exact / default; also the largest difference between the
two packages' outputs, and each one's from eager.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEGMENTS = 4
sys.path.insert(0, str(HERE))


def build(name: str, folder: Path, cpu_target: str) -> dict:
    import tdaot
    from policies import POLICIES

    policy, example = POLICIES[name]()
    built = {}
    for exact in (False, True):
        artifact = tdaot.build(
            policy, example, folder / f"{name}-{exact}.pt2", cpu_target=cpu_target, exact_math=exact
        )
        built[exact] = artifact
    return {"policy": policy, "example": example, "built": built}


def rows_of(example, batch: int):
    """``batch`` rows of ``example``, its own rows repeated."""
    import torch

    return example[torch.arange(batch) % example.batch_size[0]]


def measure(name: str, case: dict, batches: list[int], seconds: float) -> list[dict]:
    import torch

    import tdaot

    loaded = {exact: tdaot.load(a.path, intra_op_threads=1) for exact, a in case["built"].items()}
    keys = case["built"][False].manifest.input_keys
    rows = []
    for batch in batches:
        example = rows_of(case["example"], batch)
        tensors = [example.get(tuple(k.split("."))) for k in keys]
        calls = {exact: (lambda p=p, t=tensors: p.run_positional(*t)) for exact, p in loaded.items()}
        for call in calls.values():
            for _ in range(20):
                call()
        times = {exact: [] for exact in calls}
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline or min(map(len, times.values())) < 50:
            order = list(calls)
            random.shuffle(order)
            for exact in order:
                started = time.perf_counter_ns()
                calls[exact]()
                times[exact].append(time.perf_counter_ns() - started)
        outs = {exact: call() for exact, call in calls.items()}
        with torch.no_grad():
            eager = case["policy"](example.clone())
        out_keys = case["built"][False].manifest.output_keys
        first = out_keys[0]
        reference = eager.get(tuple(first.split(".")))

        def diff(a, b):
            return float((a.float() - b.float()).abs().max())

        p50 = {exact: statistics.median(t) / 1000 for exact, t in times.items()}
        # The same ratio over consecutive quarters of the turns: its spread is the run's noise.
        quarter = len(times[False]) // SEGMENTS
        segments = [
            statistics.median(times[True][i * quarter : (i + 1) * quarter])
            / statistics.median(times[False][i * quarter : (i + 1) * quarter])
            for i in range(SEGMENTS)
        ]
        rows.append(
            {
                "policy": name,
                "batch": batch,
                "default_us": p50[False],
                "exact_us": p50[True],
                "exact_over_default": p50[True] / p50[False],
                "by_quarter": segments,
                "calls": len(times[False]),
                "max_abs_default_vs_exact": diff(outs[False][0], outs[True][0]),
                "max_abs_default_vs_eager": diff(outs[False][0], reference),
                "max_abs_exact_vs_eager": diff(outs[True][0], reference),
                "numerics_default": list(case["built"][False].manifest.numerics or ()),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", default="mlp,lstm")
    parser.add_argument("--batches", default="1,64,1024")
    parser.add_argument("--cpu-target", default="x86-64-v3")
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="tdaot-exact-") as folder:
        for name in args.policies.split(","):
            case = build(name, Path(folder), args.cpu_target)
            for row in measure(name, case, batches, args.seconds):
                rows.append(row)
                print(
                    f"{row['policy']:<6} batch {row['batch']:>5}: default {row['default_us']:9.1f} us, "
                    f"exact_math {row['exact_us']:9.1f} us, exact/default {row['exact_over_default']:.3f} "
                    f"({row['calls']} calls each; by quarter "
                    f"{' '.join(f'{r:.2f}' for r in row['by_quarter'])}); "
                    f"max |default - exact| {row['max_abs_default_vs_exact']:.3g}, "
                    f"vs eager: default {row['max_abs_default_vs_eager']:.3g}, "
                    f"exact {row['max_abs_exact_vs_eager']:.3g}; "
                    f"numerics {', '.join(row['numerics_default'])}",
                    flush=True,
                )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
