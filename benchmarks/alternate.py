"""One process, one call each: ONNX Runtime, the raw AOTInductor loader and tdaot, called in turn.

    .venv/bin/python benchmarks/alternate.py [--policies mlp,conv] [--batches 1,64,256,4096]
                                             [--seconds 8] [--json OUT]

Separate processes disagree here by more than the ratios the benchmark decides: in one
`make bench` run the same tdaot package in two server processes measured 0.71-1.30x of itself
(the "second process" control row); each process gets its own memory placement and runs at its
own part of a VM's drifting speed. Here every runtime is in
one process and the calls alternate one at a time (in a fresh random order every turn), so
drift and placement fall on all of them alike. A second, separate load of the tdaot package
(``tdaot (copy)``) is the control: its ratio to the first is this run's spread between two
identical models; ``tdaot bound`` is a binding of the batch on the same Policy
(``bind(batch).run()``), which must never be slower than the plain call. Every call is a Python
call (ONNX Runtime's ``InferenceSession.run``, the loader's ``aoti_load_package`` callable,
tdaot's ``run_positional``), so at batch 1, where the bindings' own overhead is most of the call,
the runtimes are compared by the C++ rows of `make bench`; batch 1 is here for bound / tdaot.

Needs the artifacts of a `make bench` build (build/bench/artifacts/<policy>/). `make bench`
runs it as one of its stages (run.py); its rows are the results' ``alternation``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from common import fmt_time_us

HERE = Path(__file__).resolve().parent

# The samples are cut into this many consecutive segments (the same turns for every runtime),
# and each ratio is also given per segment: its spread says how far the VM moved under it.
SEGMENTS = 4
# At least this many turns, however long they take (the conv policy at 4096: ~0.9 s a turn).
MIN_TURNS = 6 * SEGMENTS
# What tdaot is compared with, a ratio each.
PEERS_AND_AOTI = ("onnxruntime", "openvino", "executorch", "aoti")
PEER_NAMES = ("openvino", "executorch")  # benchmarks/peers.py's PEERS (imported late, with torch)


def load(artifacts: Path, control: Path | None = None) -> dict[str, object]:
    """Each runtime's loaded model of one policy's artifacts, tdaot's twice (the control; or, given
    ``control``, that package as the control: an A/B of two builds)."""
    import torch

    import peers
    import tdaot
    from common import onnx_session

    loaded = {
        "onnxruntime": onnx_session(artifacts / "policy.onnx"),
        "aoti": torch._inductor.aoti_load_package(str(artifacts / "policy-throughput.pt2")),
        "tdaot": tdaot.load(artifacts / "policy.pt2", intra_op_threads=1),
        "tdaot (copy)": tdaot.load(control or artifacts / "policy.pt2", intra_op_threads=1),
    }
    # The peers the build made and checked (peers.json); why not, for those it could not.
    for name, made in peers.read_status(artifacts).items():
        try:
            loaded[name] = made["error"] if "error" in made else peers.load(name, artifacts, made)
        except Exception as err:  # noqa: BLE001 - a row that says so
            loaded[name] = f"load: {peers._error(err)}"
    return loaded


def calls_for(loaded: dict[str, object], tensors: list) -> dict[str, Callable[[], object]]:
    """One zero-argument call per runtime (``load``), on the same input tensors."""
    import peers
    from common import onnx_call

    loader, native, copy = loaded["aoti"], loaded["tdaot"], loaded["tdaot (copy)"]
    # The control loop's way (issue 37): a binding of this batch on the same Policy, its buffers
    # holding the same inputs; it must never be slower than the plain call beside it.
    binding = native.bind(batch=tensors[0].shape[0])
    for spec, tensor in zip(native.manifest.inputs, tensors):
        binding.inputs[spec.key].copy_(tensor)
    calls = {
        "onnxruntime": onnx_call(loaded["onnxruntime"], tensors),
        "aoti": lambda: loader(*tensors),
        "tdaot": lambda: native.run_positional(*tensors),
        "tdaot (copy)": lambda: copy.run_positional(*tensors),
        "tdaot bound": binding.run,
    }
    for name in peers.PEERS:
        if callable(loaded[name]):  # else the reason it is not timed (a string)
            try:
                calls[name] = loaded[name](tensors)
            except ValueError:
                pass  # ExecuTorch: no program exported at this batch; the row says so
    return calls


def alternate(
    calls: dict[str, Callable[[], object]], seconds: float, clock: Callable[[], int] = time.perf_counter_ns
) -> dict[str, list[int]]:
    """Each call's time (ns; by default wall time, ``clock`` another such as the thread's CPU
    time), the calls taken in turn, one each, for ``seconds``."""
    names = list(calls)
    for call in calls.values():
        for _ in range(3):
            call()  # warm-up: first-call costs are not what is compared
    samples: dict[str, list[int]] = {name: [] for name in names}
    order = random.Random(0)
    deadline = time.perf_counter() + seconds
    turn = 0
    while time.perf_counter() < deadline or turn < MIN_TURNS:
        # A fresh random order each turn: what ran just before a call (its caches, ATen's and
        # oneDNN's state) is any runtime alike. A fixed or rotated order always puts the copy
        # right after tdaot, and it measured 0.89-1.00x of it (median 0.96); reversing the
        # order every other turn runs the first and last twice in a row.
        order.shuffle(names)
        for name in names:
            start = clock()
            calls[name]()
            samples[name].append(clock() - start)
        turn += 1
    return samples


def ratios(samples: dict[str, list[int]], numerator: str, denominator: str) -> dict:
    """p50 ratio over all turns, and its least and greatest over SEGMENTS consecutive parts."""
    top, bottom = samples[numerator], samples[denominator]
    size = len(top) // SEGMENTS
    cuts = [slice(i * size, (i + 1) * size) for i in range(SEGMENTS)]
    parts = [statistics.median(top[cut]) / statistics.median(bottom[cut]) for cut in cuts]
    return {"p50": statistics.median(top) / statistics.median(bottom), "min": min(parts), "max": max(parts)}


# The clocks a call can be timed by: wall time, or the process's CPU time (every thread of it: a
# peer's worker threads count), which a loaded machine's waits for a core do not inflate.
CLOCKS = {"wall": time.perf_counter_ns, "cpu": time.process_time_ns}


def measure(
    artifacts: Path,
    policies: list[str],
    batches: list[int],
    seconds: float,
    control: str | None = None,
    clock: str = "wall",
) -> list[dict]:
    from common import make_inputs
    from policies import timed_batches

    rows = []
    for policy in policies:
        source = artifacts / policy
        info = json.loads((source / "info.json").read_text())
        loaded = load(source, control and Path(control.format(policy=policy)))
        for batch in [b for b in batches if b in timed_batches(policy)]:
            tensors = make_inputs(info["inputs"], batch)
            samples = alternate(calls_for(loaded, tensors), seconds, CLOCKS[clock])
            row = {
                "policy": policy,
                "batch": batch,
                "clock": clock,
                "calls": len(samples["tdaot"]),
                "p50_us": {name: statistics.median(ns) / 1e3 for name, ns in samples.items()},
                "copy/tdaot": ratios(samples, "tdaot (copy)", "tdaot"),
                "bound/tdaot": ratios(samples, "tdaot bound", "tdaot"),
                "not_timed": {
                    name: loaded[name] if isinstance(loaded[name], str) else f"no program at batch {batch}"
                    for name in PEER_NAMES
                    if name not in samples
                },
            }
            for other in PEERS_AND_AOTI:
                if other in samples:
                    row[f"tdaot/{other}"] = ratios(samples, "tdaot", other)
            rows.append(row)
            print(
                f"{policy} batch {batch}: "
                + ", ".join(f"{name} {us:.1f} µs" for name, us in row["p50_us"].items())
                + "; "
                + ", ".join(f"{key} {row[key]['p50']:.2f}" for key in row if key.startswith("tdaot/"))
                + f", copy {row['copy/tdaot']['p50']:.2f}, bound {row['bound/tdaot']['p50']:.2f}",
                flush=True,
            )
    return rows


def table(rows: list[dict]) -> list[str]:
    """Markdown: the rows of a run (``results["alternation"]``), ratios with their segments' range."""

    if not rows:
        return []

    def cell(r: dict) -> str:
        return f"{r['p50']:.2f} ({r['min']:.2f}-{r['max']:.2f})"

    lines = [
        "## In one process, one call each (Python calls; benchmarks/alternate.py)",
        "",
        "ONNX Runtime, OpenVINO, ExecuTorch (XNNPACK), the raw AOTI loader and tdaot (loaded twice: the "
        "copy is the control) in one process, called in turn one call at a time, so the VM's drift and "
        "each process's memory placement fall on all alike. Ratios of p50, and in parentheses their range "
        f"over {SEGMENTS} consecutive parts of the run; copy / tdaot is the spread between two identical "
        "models; bound / tdaot is `bind(batch).run()` against the plain call of the same Policy. A peer "
        "not timed says why below the table.",
        "",
        "| policy | batch | calls | ONNX Runtime | OpenVINO | ExecuTorch | AOTI loader | tdaot "
        "| tdaot / ONNX Runtime | tdaot / OpenVINO | tdaot / ExecuTorch | tdaot / AOTI | copy / tdaot "
        "| bound / tdaot |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    notes = []
    for row in rows:
        p50 = row["p50_us"]
        names = ("onnxruntime", "openvino", "executorch", "aoti", "tdaot")
        times = " | ".join(fmt_time_us(p50[n]) if n in p50 else "not run" for n in names)
        ratio_cells = " | ".join(
            cell(row[f"tdaot/{o}"]) if f"tdaot/{o}" in row else "–" for o in PEERS_AND_AOTI
        )
        bound = cell(row["bound/tdaot"]) if "bound/tdaot" in row else "–"  # runs before issue 37
        lines.append(
            f"| {row['policy']} | {row['batch']} | {row['calls']} | {times} | {ratio_cells} "
            f"| {cell(row['copy/tdaot'])} | {bound} |"
        )
        for name, why in row.get("not_timed", {}).items():
            notes.append(f"- {row['policy']} at {row['batch']}, {name}: {why}")
    lines += ["", *sorted(set(notes))] if notes else []
    return lines + [""]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--artifacts", default=str(HERE.parent / "build/bench/artifacts"))
    parser.add_argument("--policies", default="tutorial,mlp,conv,lstm")
    parser.add_argument("--batches", default="1,64,256,4096")
    parser.add_argument("--seconds", type=float, default=8.0, help="per policy and batch")
    parser.add_argument("--cpu", type=int, default=os.cpu_count() - 1, help="-1: no pinning")
    parser.add_argument("--json", help="write the rows here too")
    # An A/B of two builds in one process: the control row runs this package ({policy} in it).
    parser.add_argument("--control", help="package for the control row (default: policy.pt2 again)")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall", help="cpu: the process's CPU time")
    args = parser.parse_args()
    if args.cpu >= 0:
        os.sched_setaffinity(0, {args.cpu})
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent / "python"))
    import torch

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    rows = measure(
        Path(args.artifacts),
        args.policies.split(","),
        [int(b) for b in args.batches.split(",")],
        args.seconds,
        args.control,
        args.clock,
    )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
