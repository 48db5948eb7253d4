"""Builds every runtime's artifact for one policy and times each step: the build half of
benchmarks/run.py, run once per policy in a fresh process with an empty inductor cache
("cold") and once more with that cache warm ("cached").

    python benchmarks/artifacts.py POLICY OUT_DIR TIMINGS.json

OUT_DIR receives: weights.pt (the eager state dict), policy.pt2 (tdaot.build as it comes:
tuning="auto", a dynamic model plus a batch-1 model), policy-throughput.pt2 (one dynamic
model, tuning="throughput": what the raw AOTInductor loaders run, as a user of plain
AOTInductor would have it), policy-latency.pt2 (tuning="latency"), policy-specialized.pt2
(the default plus static models at every benchmarked batch, specialize=SPECIALIZE), program.pt2
(torch.export.save of the same ExportedProgram, for ExportedProgram.module() and
torch.compile), policy.ts (torch.jit.trace of that program's module, frozen), policy.onnx
(torch.onnx.export of that program), policy.xml/.bin (OpenVINO IR) and policy-b{batch}.pte
(ExecuTorch, XNNPACK) with peers.json (benchmarks/peers.py), check.pt (reference inputs and eager outputs) and
info.json (input and output specs, FLOPs per sample: benchmarks/flops.py). The inductor cache is whatever
TORCHINDUCTOR_CACHE_DIR names; the driver sets it.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import flops  # noqa: E402
import peers  # noqa: E402
import tdaot  # noqa: E402
from common import as_tensordict, make_inputs  # noqa: E402
from policies import POLICIES, timed_batches  # noqa: E402
from tdaot import keys as keyutil  # noqa: E402
from tdaot.builder.export import export_context, export_policy  # noqa: E402

# The batch sizes make bench times, each with a model of its own in policy-specialized.pt2.
SPECIALIZE = (1, 64, 256, 4096)


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def build_all(name: str, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, dict] = {}
    policy, example = POLICIES[name]()
    policy.eval()
    torch.save(policy.state_dict(), out / "weights.pt")

    # tdaot: export + AOTInductor compile + package, timed by tdaot itself. It runs first, so
    # its export also pays the process's first-export warm-up, as `tdaot build` would.
    artifact = tdaot.build(policy, example, out / "policy.pt2")
    timings["tdaot .pt2"] = {
        "export_s": artifact.export_seconds,
        "compile_s": artifact.compile_seconds,
        "bytes": artifact.size_bytes,
    }
    manifest = artifact.manifest
    # One dynamic model, as plain AOTInductor builds it: the raw loaders' package.
    throughput = tdaot.build(policy, example, out / "policy-throughput.pt2", tuning="throughput")
    timings["tdaot .pt2, throughput build"] = {
        "export_s": throughput.export_seconds,
        "compile_s": throughput.compile_seconds,
        "bytes": throughput.size_bytes,
    }
    # The same policy built for batch-1 latency (inductor's C++ GEMM template, recurrent
    # layers decomposed): the "latency build" rows, Python and native.
    latency = tdaot.build(policy, example, out / "policy-latency.pt2", tuning="latency")
    timings["tdaot .pt2, latency build"] = {
        "export_s": latency.export_seconds,
        "compile_s": latency.compile_seconds,
        "bytes": latency.size_bytes,
    }
    # The default package plus static models at the benchmark's batch sizes (above 16 rows:
    # throughput tuned, a large batch in chunks; tdaot.builder.tuning): the "specialize" row.
    # The pixel networks are timed at 1 and 64 only: no models for batches never timed.
    batches = tuple(b for b in SPECIALIZE if b in timed_batches(name))
    specialized = tdaot.build(policy, example, out / "policy-specialized.pt2", specialize=batches)
    timings["tdaot .pt2, specialize=" + ",".join(map(str, batches))] = {
        "export_s": specialized.export_seconds,
        "compile_s": specialized.compile_seconds,
        "bytes": specialized.size_bytes,
    }
    if "cache" in inspect.signature(tdaot.build).parameters:
        # tdaot's own artifact cache (a content-addressed copy): store once, then time a hit.
        from tdaot.builder.cache import ArtifactCache

        with tempfile.TemporaryDirectory(dir=out) as scratch:
            cache = ArtifactCache(Path(scratch) / "cache")
            tdaot.build(policy, example, Path(scratch) / "a.pt2", cache=cache)
            hit = tdaot.build(policy, example, Path(scratch) / "b.pt2", cache=cache)
            timings["tdaot .pt2 (tdaot cache hit)"] = {
                "export_s": hit.export_seconds,
                "compile_s": hit.compile_seconds,
                "bytes": hit.size_bytes,
                "cache_hit": bool(getattr(hit, "cache_hit", False)),
            }

    # The one ExportedProgram every other artifact starts from (a second export: warm).
    exported, export_s = timed(
        lambda: export_policy(policy, example, interaction_type=manifest.interaction_type)
    )
    program = exported.program
    _, save_s = timed(lambda: torch.export.save(program, str(out / "program.pt2")))
    timings["ExportedProgram"] = {
        "export_s": export_s,
        "compile_s": save_s,
        "compile_note": "torch.export.save",
        "bytes": (out / "program.pt2").stat().st_size,
    }

    in_keys = [spec.key for spec in manifest.inputs]
    args = tuple(example.get(keyutil.td_key(keyutil.from_manifest(k))).contiguous() for k in in_keys)

    # TorchScript: trace the program's module (tensordict modules themselves do not trace), freeze.
    with torch.no_grad():
        traced, trace_s = timed(lambda: torch.jit.trace(program.module(), args, check_trace=False))
        start = time.perf_counter()
        frozen = torch.jit.freeze(traced.eval())
        frozen.save(str(out / "policy.ts"))
        freeze_s = time.perf_counter() - start
    timings["TorchScript"] = {
        "export_s": export_s + trace_s,
        "compile_s": freeze_s,
        "compile_note": "trace counted in export; freeze + save",
        "bytes": (out / "policy.ts").stat().st_size,
    }

    # ONNX from the same program (dynamo exporter); the TorchScript-based one if that fails.
    names = [f"in{i}" for i in range(len(in_keys))]
    out_names = [f"out{i}" for i in range(len(manifest.outputs))]
    onnx_path = str(out / "policy.onnx")
    start = time.perf_counter()
    try:
        torch.onnx.export(program, args, onnx_path, dynamo=True, input_names=names, output_names=out_names)
        exporter = "dynamo"
    except Exception as err:  # noqa: BLE001 - fall back, and say so in the results
        print(f"dynamo ONNX export failed ({type(err).__name__}); using dynamo=False", file=sys.stderr)
        torch.onnx.export(
            program.module(),
            args,
            onnx_path,
            dynamo=False,
            input_names=names,
            output_names=out_names,
            dynamic_axes={n: {0: "batch"} for n in names + out_names},
            opset_version=17,
        )
        exporter = "torchscript (dynamo=False)"
    onnx_s = time.perf_counter() - start
    timings["ONNX"] = {
        "export_s": export_s + onnx_s,
        "compile_s": None,
        "compile_note": "ONNX Runtime optimises the graph at session creation (see load time)",
        # The dynamo exporter writes the weights beside the graph (policy.onnx.data).
        "bytes": sum(os.path.getsize(p) for p in (onnx_path, onnx_path + ".data") if os.path.exists(p)),
        "exporter": exporter,
    }

    # torch.compile: no artifact; compiling happens on the first calls (a static graph at
    # batch 1, then a dynamic one at the next batch size), under inference_mode like the worker.
    specs = [{"key": s.key, "dtype": s.dtype, "shape": list(s.shape)} for s in manifest.inputs]
    compiled = torch.compile(torch.export.load(str(out / "program.pt2")).module())
    start = time.perf_counter()
    with torch.inference_mode():
        compiled(*make_inputs(specs, 1))
        compiled(*make_inputs(specs, 64))
    timings["torch.compile"] = {
        "export_s": None,
        "compile_s": time.perf_counter() - start,
        "compile_note": "first calls at batch 1 and 64 (two graphs)",
        "bytes": None,
    }

    # Reference outputs from the eager policy, for every runtime's parity check.
    cases = []
    with export_context(manifest.interaction_type), torch.inference_mode():
        for batch in (1, 64):
            # Seeded apart from the timed inputs, at the batch the README states.
            inputs = [t.clone() for t in make_inputs(specs, batch, seed=1000 + batch)]
            td = policy(as_tensordict(in_keys, inputs))
            outputs = [td.get(keyutil.td_key(keyutil.from_manifest(s.key))).clone() for s in manifest.outputs]
            cases.append({"inputs": inputs, "outputs": outputs})
    torch.save({"cases": cases}, out / "check.pt")

    # OpenVINO and ExecuTorch from the same program, checked against those eager outputs.
    status = peers.build_all(program, specs, list(timed_batches(name)), out, cases)
    for peer, made in status.items():
        timings[peers.LABELS[peer]] = {
            "export_s": export_s,
            "compile_s": made.get("seconds"),
            "compile_note": made.get("error") or f"from {made.get('source', 'the program, per batch')}",
            "bytes": made.get("bytes"),
        }

    info = {
        "policy": name,
        "inputs": specs,
        "outputs": [{"key": s.key, "dtype": s.dtype, "shape": list(s.shape)} for s in manifest.outputs],
        "batch": [manifest.batch.min, manifest.batch.max],
        "interaction_type": manifest.interaction_type,
        "onnx_exporter": exporter,
        "flops_per_sample": flops.flops_per_sample(policy, example, manifest.interaction_type),
    }
    (out / "info.json").write_text(json.dumps(info, indent=2) + "\n")
    return timings


def main() -> int:
    name, out, timings_path = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    timings = build_all(name, out)
    timings_path.write_text(json.dumps(timings, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
