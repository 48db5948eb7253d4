"""In-process A/B of the dynamic model's run-time slicing (ModelSpec.chunk_rows, issue 29): the
default package as built, copies of it with another chunk_rows or none (the manifest rewritten,
the compiled model the same), and ONNX Runtime, all in this one process, pinned to one CPU, one
thread, called in turn (a chunk of calls each, the order rotated every round) so load from
elsewhere on the machine hits every variant alike. Prints p50 per variant and its ratio to ONNX
Runtime and to the unchunked model, with the CPU time, system time and minor page faults per
call (getrusage over the variant's calls: robust to the load, unlike wall time).

    .venv/bin/python benchmarks/chunks_ab.py [--policies conv,mlp] [--batches 64,256,4096]
        [--rows 128,256,512] [--rounds 5] [--json out.json]

Needs the artifacts of a `make bench` run (build/bench/artifacts/<policy>/policy.pt2, policy.onnx).
"""

from __future__ import annotations

import os

# One intra-op thread, set before torch and ONNX Runtime read it.
os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import tdaot  # noqa: E402
from common import make_inputs, onnx_call, onnx_session  # noqa: E402
from tdaot import _torch_compat  # noqa: E402
from tdaot.manifest import METADATA_KEY, Manifest  # noqa: E402


def with_chunk_rows(package: Path, rows: int | None, out: Path) -> Path:
    """A copy of ``package`` whose dynamic model has chunk_rows ``rows`` (None: absent). The
    manifest copies sit in the digest-exempt metadata JSONs, so the copy still loads."""
    records = _torch_compat.read_archive(str(package))
    for name, data in records.items():
        if not name.endswith("_metadata.json"):
            continue
        metadata = json.loads(data)
        if METADATA_KEY not in metadata:
            continue
        manifest = json.loads(metadata[METADATA_KEY])
        for model in manifest.get("models") or ():
            if model["batch"]["min"] != model["batch"]["max"]:
                model.pop("chunk_rows", None)
                if rows is not None:
                    model["chunk_rows"] = rows
        metadata[METADATA_KEY] = Manifest.from_dict(manifest).to_json()
        records[name] = json.dumps(metadata).encode()
    _torch_compat.write_archive(str(out), records)
    return out


def measure(calls: dict, rounds: int, per_round: int) -> dict:
    """Per variant: every call's wall time, and getrusage totals over them."""
    samples = {name: [] for name in calls}
    usage = {name: [0.0, 0.0, 0] for name in calls}  # user s, system s, minor faults
    names = list(calls)
    for call in calls.values():
        call()  # warm-up: first-call costs are not what is compared
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            call = calls[name]
            before = resource.getrusage(resource.RUSAGE_SELF)
            for _ in range(per_round):
                start = time.perf_counter_ns()
                call()
                samples[name].append(time.perf_counter_ns() - start)
            after = resource.getrusage(resource.RUSAGE_SELF)
            usage[name][0] += after.ru_utime - before.ru_utime
            usage[name][1] += after.ru_stime - before.ru_stime
            usage[name][2] += after.ru_minflt - before.ru_minflt
    out = {}
    for name, times in samples.items():
        n = len(times)
        out[name] = {
            "n": n,
            "p50_s": statistics.median(times) / 1e9,
            "cpu_s": (usage[name][0] + usage[name][1]) / n,
            "sys_s": usage[name][1] / n,
            "faults": usage[name][2] / n,
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--artifacts", default="build/bench/artifacts")
    parser.add_argument("--policies", default="tutorial,mlp,conv,lstm")
    parser.add_argument("--batches", default="64,256,4096")
    parser.add_argument("--rows", default="", help="other chunk_rows to time beside the built one")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cpu", type=int, default=os.cpu_count() - 1, help="-1: no pinning")
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    if args.cpu >= 0:
        os.sched_setaffinity(0, {args.cpu})
    torch.set_num_threads(1)
    results = []
    with tempfile.TemporaryDirectory(prefix="chunks-ab-") as scratch:
        for policy in args.policies.split(","):
            source = Path(args.artifacts) / policy
            built = tdaot.load(source / "policy.pt2", intra_op_threads=1)
            rows = next((m.chunk_rows for m in built.manifest.models if m.batch.dynamic), None)
            variants = {f"built ({rows})": source / "policy.pt2"}
            unchunked = Path(scratch) / f"{policy}-0.pt2"
            variants["unchunked"] = with_chunk_rows(source / "policy.pt2", None, unchunked)
            for other in (int(r) for r in args.rows.split(",") if r):
                copy = Path(scratch) / f"{policy}-{other}.pt2"
                variants[f"rows {other}"] = with_chunk_rows(source / "policy.pt2", other, copy)
            loaded = {name: tdaot.load(path, intra_op_threads=1) for name, path in variants.items()}
            specs = [{"dtype": s.dtype, "shape": list(s.shape)} for s in built.manifest.inputs]
            session = onnx_session(source / "policy.onnx")
            for batch in (int(b) for b in args.batches.split(",")):
                tensors = make_inputs(specs, batch)
                calls = {"onnxruntime": onnx_call(session, tensors)}
                for name, native in loaded.items():
                    calls[name] = bound_call(native.run_positional, tensors)
                per_round = max(2, min(200, int(0.3 / max(1e-6, _once(calls["unchunked"])))))
                row = {"policy": policy, "batch": batch, "variants": measure(calls, args.rounds, per_round)}
                results.append(row)
                print_row(row)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


def bound_call(run, tensors: list[torch.Tensor]):
    return lambda: run(*tensors)


def _once(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def print_row(row: dict) -> None:
    variants = row["variants"]
    ort, whole = variants["onnxruntime"]["p50_s"], variants["unchunked"]["p50_s"]
    print(f"\n{row['policy']} batch {row['batch']}")
    for name, v in variants.items():
        print(
            f"  {name:<14} n={v['n']:<5} p50 {v['p50_s'] * 1e3:9.3f} ms  /ORT {v['p50_s'] / ort:5.2f}  "
            f"/unchunked {v['p50_s'] / whole:5.2f}  cpu {v['cpu_s'] * 1e3:8.2f} ms  "
            f"sys {v['sys_s'] * 1e3:7.2f} ms  faults {v['faults']:8.0f}",
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(main())
