"""Which model the full runtime runs at batch 1, in one process (issue 42; benchmarks/README.md,
"Why the IMPALA ResNet is 3.6x ONNX Runtime at batch 1").

    .venv/bin/python benchmarks/b1_routes.py [--policies nature,impala] [--seconds 10]
        [--artifacts DIR] [--package policy.pt2]

For each policy's default package (a `make bench` build: build/bench/artifacts/<policy>/) it
times, at batch 1, one call each per turn in a fresh random order (alternate.py's loop): the
package as the full runtime loads it (``tdaot``: the model it routes batch 1 to), and each of its
models that serves batch 1 forced (PolicyOptions::model_name: ``b1``, the lite-capable latency
model; ``model``, the dynamic throughput model), and the packages of ``--variant``, each plain
(``run_positional``) and bound (``bind(1).run()``), and ONNX Runtime where it is installed.
Ratios are to ``b1``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--artifacts", default=str(HERE.parent / "build/bench/artifacts"))
    parser.add_argument("--package", default="policy.pt2")
    parser.add_argument("--policies", default="nature,impala")
    parser.add_argument("--seconds", type=float, default=10.0)
    # Other packages of the same policy to time beside it: NAME=PATH, {policy} in PATH.
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=PATH")
    # On a loaded host a wall-time sample is mostly the scheduler's; the calling thread's CPU
    # time is not (every model here runs in the calling thread: intra_op_threads=1).
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    args = parser.parse_args()
    os.sched_setaffinity(0, {os.cpu_count() - 1})
    sys.path.insert(0, str(HERE))
    import torch

    import tdaot
    from alternate import alternate, ratios
    from common import make_inputs, onnx_call, onnx_session

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    for policy in args.policies.split(","):
        source = Path(args.artifacts) / policy
        info = json.loads((source / "info.json").read_text())
        tensors = make_inputs(info["inputs"], 1)
        package = str(source / args.package)
        loaded = {"tdaot": tdaot.load(package, intra_op_threads=1)}
        # Each model of the package that serves batch 1, forced (b1, model).
        for spec in loaded["tdaot"].manifest.models:
            if 1 in spec.batch:
                loaded[spec.name] = tdaot.load(package, intra_op_threads=1, model_name=spec.name)
        for variant in args.variant:
            name, path = variant.split("=", 1)
            loaded[name] = tdaot.load(path.format(policy=policy), intra_op_threads=1)
        calls = {}
        for name, native in loaded.items():
            binding = native.bind(batch=1)
            for spec, tensor in zip(native.manifest.inputs, tensors):
                binding.inputs[spec.key].copy_(tensor)
            calls[name] = lambda native=native, tensors=tensors: native.run_positional(*tensors)
            calls[f"{name} bound"] = binding.run
            print(f"{policy}: {name} runs {binding.model!r} at batch 1", flush=True)
        try:
            calls["onnxruntime"] = onnx_call(onnx_session(source / "policy.onnx"), tensors)
        except (ImportError, OSError) as err:  # not installed, or no ONNX export: no row
            print(f"{policy}: no ONNX Runtime row ({err})")
        clock = time.thread_time_ns if args.clock == "cpu" else time.perf_counter_ns
        samples = alternate(calls, args.seconds, clock)
        p50 = {name: statistics.median(ns) / 1e3 for name, ns in samples.items()}
        print(
            f"{policy} batch 1, {len(samples['tdaot'])} turns, p50 ({args.clock}): "
            + ", ".join(f"{name} {us:.0f} µs" for name, us in p50.items())
        )
        others = [name for name in loaded if name != "b1"]
        pairs = [(f"{n}{b}", f"b1{b}") for n in others for b in ("", " bound")]
        for top, bottom in [*pairs, ("tdaot bound", "tdaot"), ("tdaot", "onnxruntime")]:
            if top in samples and bottom in samples:
                r = ratios(samples, top, bottom)
                print(f"  {top} / {bottom}: {r['p50']:.2f} ({r['min']:.2f}-{r['max']:.2f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
