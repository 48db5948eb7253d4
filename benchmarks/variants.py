"""Experiments behind the profile in benchmarks/README.md: the same ExportedProgram compiled
by AOTInductor with other inductor options ("freezing", "decomposed-lstm", ...), or the
default package called under a guard ("guard:inference_mode", "guard:no_grad"), each timed
beside the default through tdaot::Policy (the C++ bench server), alternating between variants.

    .venv/bin/python benchmarks/variants.py [--policies conv,lstm] [--work build/bench]

Needs the artifacts of a `make bench` run (build/bench/artifacts/<policy>/program.pt2).
Prints a table and writes build/bench/variants/results.json; nothing here is part of tdaot.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from run import Worker, base_env  # noqa: E402
from tdaot.manifest import METADATA_KEY, read_metadata  # noqa: E402

try:  # tdaot's own compile options, which every variant starts from
    from tdaot.compile import COMPILE_OPTIONS
except ImportError:
    COMPILE_OPTIONS = {}

# Variant names join these parts with "+"; "decomposed-lstm" rewrites the graph instead.
VARIANTS = {
    "default": {},
    "static-threads": {"cpp.dynamic_threads": False},
    "freezing": {"freezing": True},
    "cpp-gemm": {"max_autotune": True, "max_autotune_gemm_backends": "CPP,ATEN"},
}


def decompose_lstm(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """aten.lstm replaced by its decomposition (matmuls and pointwise ops inductor can fuse)."""
    from torch._decomp import decomposition_table

    table = {torch.ops.aten.lstm.input: decomposition_table[torch.ops.aten.lstm.input]}
    return program.run_decompositions(table)


def build_variant(policy: str, variant: str, work: Path) -> Path:
    """One package per variant, carrying the default package's manifest so tdaot loads it."""
    out = work / "variants" / f"{policy}-{variant}.pt2"
    source = work / "artifacts" / policy
    manifest_json = read_metadata(source / "policy.pt2")[METADATA_KEY]
    program = torch.export.load(str(source / "program.pt2"))
    options = dict(COMPILE_OPTIONS)
    for part in variant.split("+"):
        if part == "decomposed-lstm":
            program = decompose_lstm(program)
        else:
            options.update(VARIANTS[part])
    options["aot_inductor.metadata"] = {METADATA_KEY: manifest_json}
    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    # Inductor applies freezing (weight prepacking, mkldnn/mkl fused ops) only with grad off.
    with torch.no_grad():
        torch._inductor.aoti_compile_and_package(program, package_path=str(out), inductor_configs=options)
    print(f"built {out.name} in {time.perf_counter() - start:.1f} s", flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policies", default="tutorial,mlp,conv,lstm")
    parser.add_argument("--variants", default="default,freezing")
    parser.add_argument("--work", default=str(HERE.parent / "build/bench"))
    parser.add_argument("--server", default=str(HERE.parent / "build/bench/cpp/tdaot-bench-server"))
    parser.add_argument("--batches", default="1,64")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cpu", type=int, default=os.cpu_count() - 1)
    parser.add_argument("--no-build", action="store_true")
    args = parser.parse_args()
    args.python = sys.executable
    work = Path(args.work)
    (work / "logs").mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    batches = [int(b) for b in args.batches.split(",")]

    packages = {}
    for policy in args.policies.split(","):
        for variant in args.variants.split(","):
            if "decomposed-lstm" in variant and policy != "lstm":
                continue
            path = work / "variants" / f"{policy}-{variant}.pt2"
            if variant == "default" or variant.startswith("guard:"):
                path = work / "artifacts" / policy / "policy.pt2"
            elif not args.no_build:
                path = subprocess_build(policy, variant, work)
            packages[policy, variant] = path

    # Each package against the eager outputs the main benchmark saved (check.pt).
    for (policy, variant), path in packages.items():
        reference = torch.load(work / "artifacts" / policy / "check.pt", weights_only=True)
        model = torch._inductor.aoti_load_package(str(path))
        error = max(
            float((got - want).abs().max())
            for case in reference["cases"]
            for got, want in zip(model(*case["inputs"]), case["outputs"])
        )
        print(f"{policy} {variant}: max abs error vs eager {error:.1e}", flush=True)

    workers = {}
    for (policy, variant), path in packages.items():
        info = json.loads((work / "artifacts" / policy / "info.json").read_text())
        worker = Worker("tdaot", "cpp", policy, args, work)
        guard = variant.split(":", 1)[1] if variant.startswith("guard:") else ""
        load = {
            "cmd": "load",
            "runtime": "tdaot",
            "path": str(path),
            "inputs": info["inputs"],
            "guard": guard,
        }
        worker.ask(load)
        for batch in batches:
            worker.ask({"cmd": "run", "batch": batch, "iters": 300, "max_seconds": 0.2})
        workers[policy, variant] = worker

    samples: dict[tuple, list[int]] = {}
    for _ in range(args.rounds):
        for batch in batches:
            for key, worker in workers.items():
                request = {"cmd": "run", "batch": batch, "iters": 2000, "min_iters": 20, "max_seconds": 0.2}
                ns = worker.ask(request)["ns"]
                samples.setdefault((*key, batch), []).extend(ns)
    for worker in workers.values():
        worker.close()

    rows = []
    print(f"load average {[round(x, 2) for x in os.getloadavg()]}")
    print(f"{'policy':<10}{'variant':<26}{'batch':>6}{'p50 us':>10}{'p99 us':>10}{'vs default':>12}")
    for (policy, variant, batch), ns in samples.items():
        p50 = statistics.median(ns) / 1e3
        p99 = sorted(ns)[int(0.99 * len(ns))] / 1e3
        base = statistics.median(samples[policy, "default", batch]) / 1e3
        rows.append({"policy": policy, "variant": variant, "batch": batch, "p50_us": p50, "p99_us": p99})
        print(f"{policy:<10}{variant:<26}{batch:>6}{p50:>10.1f}{p99:>10.1f}{p50 / base:>11.2f}x")
    name = "results-" + args.policies.replace(",", "-") + ".json"
    (work / "variants" / name).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


def subprocess_build(policy: str, variant: str, work: Path) -> Path:
    # Fresh process per build: inductor options are process-global.
    code = (
        f"import sys; sys.path.insert(0, {str(HERE)!r}); import variants, pathlib, torch; "
        "torch.set_num_threads(1); "
        f"variants.build_variant({policy!r}, {variant!r}, pathlib.Path({str(work)!r}))"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=base_env(work / "inductor-cache" / policy))
    return work / "variants" / f"{policy}-{variant}.pt2"


if __name__ == "__main__":
    sys.exit(main())
