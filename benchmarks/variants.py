"""Experiments behind the profile in benchmarks/README.md: the same ExportedProgram compiled
by tdaot with other build settings or inductor options ("latency", "freezing", ...), or the
default package called under a guard ("guard:inference_mode", "guard:no_grad"), each timed
beside the default through tdaot::Policy (the C++ bench server), alternating between variants.

    .venv/bin/python benchmarks/variants.py [--policies conv,lstm] [--variants default,latency]

Needs the artifacts of a `make bench` run (build/bench/artifacts/<policy>/program.pt2 and
policy.pt2). Every variant is compiled and sealed by tdaot.builder.compile.compile_package with the
default package's manifest, so tdaot.load accepts it (file digests included). Prints a table
and writes build/bench/variants/results-*.json; nothing here is part of tdaot.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
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

import tdaot  # noqa: E402
from run import Worker, base_env  # noqa: E402
from tdaot import _torch_compat  # noqa: E402
from tdaot.builder import BuildOptions  # noqa: E402
from tdaot.builder.compile import compile_package  # noqa: E402
from tdaot.builder.rewrites import convolutions_as_gemm, divisions_as_multiplications  # noqa: E402
from tdaot.builder.tuning import tune_program  # noqa: E402
from tdaot.manifest import read_manifest  # noqa: E402

# Variant names join these parts with "+". Each part sets tdaot build settings
# (kernel_threads, tuning), extra inductor options, or rewrites the graph.
VARIANTS = {
    "default": {},
    "latency": {"tuning": "latency"},  # tdaot's latency build: C++ GEMM template + decomposed RNNs
    "dynamic-threads": {"kernel_threads": 0},  # OpenMP threads decided at run time
    "freezing": {"options": {"freezing": True}},
    # The GEMM template as inductor's own max_autotune picks it: by timing candidates on the
    # build machine (tdaot's latency tuning picks the template without timing).
    "autotuned-gemm": {"options": {"max_autotune": True, "max_autotune_gemm_backends": "CPP,ATEN"}},
    "decomposed-rnn": {"rewrite": "latency"},  # only the latency tuning's graph rewrite
    # 2-D convolutions as im2col (unfold) + a matrix product (tdaot.builder.rewrites, what the
    # bound models of tuning="auto" get), which the latency tuning then gives to the C++ GEMM
    # template instead of oneDNN.
    "conv-gemm": {"rewrite": "conv-gemm"},
    # A division by a constant number as a multiplication by its reciprocal (what latency
    # models get), on the throughput model.
    "reciprocal": {"rewrite": "reciprocal"},
    # Every 4-D weight stored channels-last (inductor otherwise copies each convolution weight to
    # channels-last on every call of the throughput model).
    "cl-weights": {"rewrite": "cl-weights"},
    # Activations left in the graph's layout (NCHW): no channels-last conversion of the pixels
    # (inductor's layout optimisation otherwise makes every convolution channels-last).
    "nchw": {"options": {"layout_optimization": False}},
}


def rewrite(program: torch.export.ExportedProgram, name: str) -> torch.export.ExportedProgram:
    if name == "conv-gemm":
        return convolutions_as_gemm(program)
    if name == "reciprocal":
        return divisions_as_multiplications(program)
    if name == "cl-weights":
        four_d = {k: v for k, v in program.state_dict.items() if isinstance(v, torch.Tensor) and v.dim() == 4}
        cl = {k: v.detach().contiguous(memory_format=torch.channels_last) for k, v in four_d.items()}
        return _torch_compat.with_state(program, cl)
    return tune_program(program, name)


def build_variant(policy: str, variant: str, work: Path) -> Path:
    """One package per variant, with the default package's manifest, sealed by tdaot."""
    out = work / "variants" / f"{policy}-{variant}.pt2"
    source = work / "artifacts" / policy
    manifest = dataclasses.replace(read_manifest(source / "policy.pt2"), files={}, models=())
    program = torch.export.load(str(source / "program.pt2"))
    settings = {"kernel_threads": 1, "tuning": "throughput"}
    options: dict = {}
    for part in variant.split("+"):
        spec = VARIANTS[part]
        settings.update({k: v for k, v in spec.items() if k in settings})
        options.update(spec.get("options", {}))
        if "rewrite" in spec:
            program = rewrite(program, spec["rewrite"])
    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    # Inductor applies freezing (weight prepacking, mkldnn/mkl fused ops) only with grad off.
    with torch.no_grad(), torch._inductor.config.patch(options) if options else contextlib.nullcontext():
        compile_package(program, manifest, str(out), BuildOptions(**settings))
    print(f"built {out.name} in {time.perf_counter() - start:.1f} s", flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policies", default="tutorial,mlp,conv,lstm")
    parser.add_argument("--variants", default="default,latency", help=f"parts: {', '.join(VARIANTS)}")
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
            if "decomposed-rnn" in variant and policy != "lstm":
                continue
            path = work / "variants" / f"{policy}-{variant}.pt2"
            if variant == "default" or variant.startswith("guard:"):
                path = work / "artifacts" / policy / "policy.pt2"
            elif not args.no_build:
                path = subprocess_build(policy, variant, work)
            packages[policy, variant] = path

    # Each package, loaded by tdaot (digests checked), against the eager outputs the main
    # benchmark saved (check.pt).
    for (policy, variant), path in packages.items():
        reference = torch.load(work / "artifacts" / policy / "check.pt", weights_only=True)
        model = tdaot.load(path)
        error = max(
            float((got - want).abs().max())
            for case in reference["cases"]
            for got, want in zip(model.run_positional(*case["inputs"]), case["outputs"])
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
