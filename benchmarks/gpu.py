"""tdaot on a GPU against the runtimes users would pick instead (`make test-cuda STEP=bench`).

For each policy (benchmarks/policies.py) it builds, on the GPU, the tdaot package
(device="cuda", one dynamic model), plain AOTInductor's package of the same exported program
and a frozen TorchScript trace, then times at batch 1, 64 and 4096, each call until the GPU has
finished it (a device synchronize per call: what a control loop waits for):

- tdaot native (tdaot::Policy::run_positional), tdaot bound (tdaot::Binding::run) and tdaot
  bound replaying a CUDA graph (BindOptions::cuda_graph), raw AOTIModelPackageLoader and
  TorchScript torch::jit::load, each in the C++ server (benchmarks/cpp/bench_server.cpp);
- eager: the TensorDictModule on the GPU, from Python, under no_grad.

    python benchmarks/gpu.py --server build/bench/cpp/tdaot-bench-server [--out DIR]

Writes <date>-<gpu>-cuda.json and .md (the GPU's name in the file name; GPU, driver, torch and
CUDA in the context) to --out, default benchmarks/results/.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import tdaot  # noqa: E402
from policies import POLICIES  # noqa: E402
from tdaot import keys as keyutil  # noqa: E402
from tdaot.builder.export import export_policy  # noqa: E402

CPP_RUNTIMES = {
    "tdaot": "tdaot native (C++)",
    "tdaot-bound": "tdaot native, bound (C++)",
    "tdaot-bound-graph": "tdaot native, bound, CUDA graph (C++)",
    "aoti": "AOTI AOTIModelPackageLoader (C++)",
    "torchscript": "TorchScript torch::jit::load (C++)",
}
EAGER = "eager TensorDictModule (Py)"


def build(name: str, out: Path) -> dict:
    """The three artifacts of policy ``name`` built for cuda, and its input specs."""
    policy, example = POLICIES[name]()
    policy, example = policy.eval().to("cuda"), example.to("cuda")
    artifact = tdaot.build(policy, example, out / "tdaot.pt2", device="cuda")
    program = export_policy(policy, example, interaction_type=artifact.manifest.interaction_type).program
    torch._inductor.aoti_compile_and_package(program, package_path=str(out / "aoti.pt2"))
    keys = [spec.key for spec in artifact.manifest.inputs]
    args = tuple(example.get(keyutil.td_key(keyutil.from_manifest(k))).contiguous() for k in keys)
    with torch.no_grad():
        torch.jit.freeze(torch.jit.trace(program.module(), args, check_trace=False).eval()).save(
            str(out / "policy.ts")
        )
    specs = [{"dtype": spec.dtype, "shape": list(spec.shape)} for spec in artifact.manifest.inputs]
    paths = {"tdaot": out / "tdaot.pt2", "aoti": out / "aoti.pt2", "torchscript": out / "policy.ts"}
    return {"policy": policy, "example": example, "specs": specs, "paths": paths}


def time_cpp(server: str, runtime: str, path: Path, specs: list, batches: list[int], args) -> dict:
    """{batch: summary_us} of one runtime in its own server process ({batch: error} on failure)."""
    process = subprocess.Popen([server], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(**request) -> dict:
        process.stdin.write(json.dumps(request) + "\n")
        process.stdin.flush()
        return json.loads(process.stdout.readline())

    rows: dict = {}
    try:
        loaded = ask(cmd="load", runtime=runtime, path=str(path), inputs=specs, device="cuda")
        if not loaded["ok"]:
            return {batch: {"error": loaded["error"]} for batch in batches}
        for batch in batches:
            first = ask(cmd="first", batch=batch)
            if not first["ok"]:
                rows[batch] = {"error": first["error"]}
                continue
            ask(cmd="run", batch=batch, iters=args.warmup)
            run = ask(cmd="run", batch=batch, iters=args.iters, min_iters=100, max_seconds=args.max_seconds)
            rows[batch] = {**run["summary_us"], "calls": len(run["ns"]), "first_s": first["seconds"]}
    finally:
        process.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
        process.stdin.close()
        process.wait(timeout=60)
    return rows


def time_eager(policy, example, batches: list[int], args) -> dict:
    rows = {}
    for batch in batches:
        td = example[torch.arange(batch, device="cuda") % example.batch_size[0]].clone()
        samples = []
        with torch.no_grad():
            for i in range(args.warmup + args.iters):
                start = time.perf_counter()
                policy(td.clone(recurse=False))
                torch.cuda.synchronize()
                if i >= args.warmup:
                    samples.append((time.perf_counter() - start) * 1e6)
                if i >= args.warmup + 100 and sum(samples) > args.max_seconds * 1e6:
                    break
        samples.sort()
        rows[batch] = {
            "p50": samples[len(samples) // 2],
            "p99": samples[int(len(samples) * 0.99)],
            "max": samples[-1],
            "mean": sum(samples) / len(samples),
            "calls": len(samples),
        }
    return rows


def context() -> dict:
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(0),
        "nvidia_smi": smi,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "tdaot": tdaot.__version__,
        "timing": "per call until torch.cuda.synchronize / torch::cuda::synchronize returns",
    }


def markdown(results: dict) -> str:
    ctx = results["context"]
    lines = [
        f"# tdaot on {ctx['gpu']}",
        "",
        f"{ctx['date']}; {ctx['nvidia_smi']} (name, driver, memory); torch {ctx['torch']}, "
        f"CUDA {ctx['cuda']}; {ctx['timing']}.",
        "",
        "| policy | runtime | batch | p50 us | p99 us | max us | calls |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, runtimes in results["policies"].items():
        for label, rows in runtimes.items():
            for batch, row in rows.items():
                if "error" in row:
                    lines.append(f"| {name} | {label} | {batch} | error: {row['error'][:80]} | | | |")
                    continue
                lines.append(
                    f"| {name} | {label} | {batch} | {row['p50']:.1f} | {row['p99']:.1f} "
                    f"| {row['max']:.1f} | {row['calls']} |"
                )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True, help="benchmarks/cpp's tdaot-bench-server")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--policies", default="mlp,conv,lstm")
    parser.add_argument("--batches", default="1,64,4096")
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--max-seconds", type=float, default=2.0)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.error("no CUDA device: this benchmark runs on a GPU")
    batches = [int(b) for b in args.batches.split(",")]
    names = [name for name in args.policies.split(",") if name in POLICIES]
    results: dict = {"context": context(), "batches": batches, "policies": {}}
    with tempfile.TemporaryDirectory(prefix="tdaot-cuda-bench-") as scratch:
        for name in names:
            print(f"== {name}: building for cuda", flush=True)
            built = build(name, Path(scratch) / name)
            runtimes = {EAGER: time_eager(built["policy"], built["example"], batches, args)}
            for runtime, label in CPP_RUNTIMES.items():
                path = built["paths"]["tdaot" if runtime.startswith("tdaot") else runtime]
                runtimes[label] = time_cpp(args.server, runtime, path, built["specs"], batches, args)
                print(f"   {label}: {runtimes[label]}", flush=True)
            results["policies"][name] = runtimes
    slug = re.sub(r"[^A-Za-z0-9]+", "-", results["context"]["gpu"]).strip("-").lower()
    stem = args.out / f"{datetime.date.today().isoformat()}-{slug}-cuda"
    args.out.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    stem.with_suffix(".md").write_text(markdown(results))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
