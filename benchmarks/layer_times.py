"""Where a call's time goes, layer by layer: tdaot's oneDNN primitives beside the peers' layers.

    .venv/bin/python benchmarks/layer_times.py --policy nature --batch 64 [--calls 20]

For one `make bench` policy (build/bench/artifacts/<policy>/) at one batch, on one pinned core:
- tdaot: the package's call (p50 over ``--calls``), and each oneDNN primitive's execution time
  per call (``ONEDNN_VERBOSE=profile_exec``, in a child process: oneDNN reads it once), summed
  over a call's slices; the call less those sums is what inductor's own kernels, the slicing and
  the binding spend.
- ONNX Runtime: the session's call (p50), and each node's kernel time per call (its profiler).
- OpenVINO (where the build made its file): the request's call (p50), and each executed layer's
  time (its performance counters, ``PERF_COUNT``) on the last call.
Every runtime sees the same seeded inputs. What it found is in benchmarks/README.md ("Layer by
layer on the AMD EPYC"); nothing here is part of tdaot.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MARK = "tdaot-layer-times: timed calls start"
WARM_CALLS = 5


def input_specs(package: Path) -> list[dict]:
    import tdaot

    manifest = tdaot.load(package, intra_op_threads=1).manifest
    return [{"shape": list(spec.shape), "dtype": spec.dtype} for spec in manifest.inputs]


def tdaot_child(package: Path, batch: int, calls: int) -> None:
    """The child's part: warm calls, the mark, then ``calls`` timed calls (their p50 on the last line)."""
    import torch

    import tdaot
    from common import make_inputs

    torch.set_num_threads(1)
    policy = tdaot.load(package, intra_op_threads=1)
    inputs = make_inputs(input_specs(package), batch)
    print(json.dumps({"p50_us": p50_us(lambda: policy.run_positional(*inputs), calls, MARK)}), flush=True)


def p50_us(call, calls: int, mark: str | None = None) -> float:
    """The p50 (µs) of ``calls`` timed calls after WARM_CALLS untimed ones (``mark`` printed between)."""
    for _ in range(WARM_CALLS):
        call()
    if mark is not None:
        print(mark, flush=True)
    times = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1e3


def tdaot_layers(package: Path, batch: int, calls: int, cpu: int) -> tuple[float, dict]:
    """tdaot's call p50 (µs) and {(primitive, implementation, shape): µs per call}."""
    code = (
        f"import os, sys, pathlib; os.sched_setaffinity(0, {{{cpu}}}); sys.path.insert(0, {str(HERE)!r}); "
        f"import layer_times; layer_times.tdaot_child(pathlib.Path({str(package)!r}), {batch}, {calls})"
    )
    env = {**os.environ, "ONEDNN_VERBOSE": "profile_exec"}
    child = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    lines = child.stdout.splitlines()
    timed = lines[lines.index(MARK) + 1 :]
    layers: dict = collections.defaultdict(float)
    for line in timed:
        fields = line.split(",")
        if line.startswith("onednn_verbose") and len(fields) > 6 and fields[3] == "exec":
            layers[(fields[5], fields[6], fields[-2])] += float(fields[-1]) * 1e3 / calls
    return json.loads(timed[-1])["p50_us"], dict(layers)


def onnx_layers(model: Path, specs: list[dict], batch: int, calls: int) -> tuple[float, dict]:
    """ONNX Runtime's call p50 (µs) and {(node, op): µs per call, the median of its runs}."""
    from common import make_inputs, onnx_session

    session = onnx_session(model, profile_prefix=f"/tmp/tdaot-layer-times-{os.getpid()}")
    names = [i.name for i in session.get_inputs()]
    feeds = {name: tensor.numpy() for name, tensor in zip(names, make_inputs(specs, batch))}
    call_us = p50_us(lambda: session.run(None, feeds), calls)
    trace = Path(session.end_profiling())
    trace_events = json.loads(trace.read_text())
    events = [e for e in trace_events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    trace.unlink()
    runs: dict = collections.defaultdict(list)
    for event in events[-calls * (len(events) // (calls + WARM_CALLS)) :]:  # the timed calls' nodes
        node = (event["name"].removesuffix("_kernel_time"), event["args"].get("op_name", ""))
        runs[node].append(event["dur"])
    return call_us, {key: statistics.median(us) for key, us in runs.items()}


def openvino_layers(artifacts: Path, specs: list[dict], batch: int, calls: int) -> tuple[float, dict] | None:
    """OpenVINO's call p50 (µs) and {(layer, type, kernel): µs on the last call}; None without
    its file (peers.json says why)."""
    import openvino as ov

    import peers
    from common import make_inputs

    made = peers.read_status(artifacts).get("openvino", {})
    if "file" not in made:
        return None
    config = {**peers.OPENVINO_CONFIG, "PERF_COUNT": "YES"}
    request = ov.Core().compile_model(str(artifacts / made["file"]), "CPU", config).create_infer_request()
    feeds = {i: tensor.numpy() for i, tensor in enumerate(make_inputs(specs, batch))}
    call_us = p50_us(lambda: request.infer(feeds), calls)
    layers = {
        (info.node_name, info.node_type, info.exec_type): info.real_time.total_seconds() * 1e6
        for info in request.get_profiling_info()
        if info.status == ov.ProfilingInfo.Status.EXECUTED and info.real_time.total_seconds() > 0
    }
    return call_us, layers


def table(title: str, call_us: float, layers: dict) -> None:
    total = sum(layers.values())
    print(f"\n{title}: call p50 {call_us:.0f} µs; the layers below {total:.0f} µs; ", end="")
    print(f"the rest {call_us - total:.0f} µs")
    for key, us in sorted(layers.items(), key=lambda item: -item[1]):
        print(f"  {us:9.0f} µs  {' '.join(key)}")


def main() -> int:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--policy", required=True)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--artifacts", default=str(HERE.parent / "build/bench/artifacts"))
    parser.add_argument("--cpu", type=int, default=os.cpu_count() - 1)
    args = parser.parse_args()
    artifacts = Path(args.artifacts) / args.policy
    if not (artifacts / "policy.pt2").exists():
        parser.error(f"no package at {artifacts / 'policy.pt2'}: `make bench` builds the artifacts")
    os.sched_setaffinity(0, {args.cpu})
    package = artifacts / "policy.pt2"
    table("tdaot (oneDNN primitives)", *tdaot_layers(package, args.batch, args.calls, args.cpu))
    specs = input_specs(package)
    table("ONNX Runtime (nodes)", *onnx_layers(artifacts / "policy.onnx", specs, args.batch, args.calls))
    openvino = openvino_layers(artifacts, specs, args.batch, args.calls)
    if openvino is not None:
        table("OpenVINO (executed layers, the last call)", *openvino)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    raise SystemExit(main())
