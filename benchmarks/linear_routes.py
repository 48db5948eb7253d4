"""Linear-layer routes for the MLP policy's network (issue 42; benchmarks/README.md, "Linear
layers on the AMD EPYC"): AOTInductor packages of one dynamic-batch program, plain (ATen addmm,
what tdaot's dynamic model compiles), with inductor freezing (oneDNN prepacked weights) and with
freezing + the C++ GEMM template, timed beside ONNX Runtime and OpenVINO (if installed) in one
process, one call each per turn in a fresh random order.

    .venv/bin/python benchmarks/linear_routes.py [--seconds 4] [--batches 1,64,256,4096]
"""

from __future__ import annotations

import argparse
import os
import statistics
import warnings
from pathlib import Path

import torch
from torch import nn

from alternate import alternate  # the one-process stage's random-order loop (same directory)

ROUTES = {
    "plain": {},
    "frozen": {"freezing": True},
    "gemm": {"freezing": True, "max_autotune_gemm": True, "max_autotune_gemm_backends": "CPP"},
}
BASE = {"cpp.dynamic_threads": False, "cpp.threads": 1, "always_keep_tensor_constants": True}


def peers(onnx_path: Path) -> dict:
    """Zero-argument-factory per peer: given a numpy input, a call returning the output array."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    made = {"ort": lambda x: lambda: session.run(None, {"x": x})[0]}
    try:
        import openvino as ov
    except ImportError:
        return made
    config = {"INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY"}
    compiled = ov.Core().compile_model(str(onnx_path), "CPU", {**config, "INFERENCE_PRECISION_HINT": "f32"})
    request = compiled.create_infer_request()
    made["openvino"] = lambda x: lambda: request.infer({0: x})[compiled.output(0)]
    return made


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--batches", default="1,64,256,4096")
    parser.add_argument("--work", default=str(Path(__file__).resolve().parents[1] / "build/linroute"))
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    os.sched_setaffinity(0, {os.cpu_count() - 1})
    torch.set_num_threads(1)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(48, 256), nn.ELU(), nn.Linear(256, 256), nn.ELU(), nn.Linear(256, 12))
    example = (torch.randn(4, 48),)
    batch = torch.export.Dim("batch", min=1, max=8192)
    program = torch.export.export(net.eval(), example, dynamic_shapes=({0: batch},))
    models = {}
    for name, options in ROUTES.items():
        path = work / f"{name}.pt2"
        if not path.exists():
            with torch.no_grad():
                torch._inductor.aoti_compile_and_package(
                    program, package_path=str(path), inductor_configs={**BASE, **options}
                )
        models[name] = torch._inductor.aoti_load_package(str(path))
    onnx_path = work / "mlp.onnx"
    if not onnx_path.exists():
        names = {"input_names": ["x"], "output_names": ["y"]}
        torch.onnx.export(program, example, str(onnx_path), dynamo=True, **names)
    others = peers(onnx_path)
    for rows in [int(b) for b in args.batches.split(",")]:
        x = torch.randn(rows, 48)
        calls = {name: (lambda m=m, x=x: m(x)) for name, m in models.items()}
        calls |= {name: make(x.numpy()) for name, make in others.items()}
        with torch.no_grad():
            want = net(x)
        for name, call in calls.items():
            error = float((torch.as_tensor(call()) - want).abs().max())
            assert error < 1e-4, (name, error)
        samples = alternate(calls, args.seconds)
        p50 = {name: statistics.median(ns) / 1e3 for name, ns in samples.items()}
        print(
            f"batch {rows} load {os.getloadavg()[0]:.2f}: "
            + ", ".join(f"{name} {us:.1f} us" for name, us in p50.items())
            + " | "
            + ", ".join(f"{a}/{b} {p50[a] / p50[b]:.2f}" for a in ROUTES for b in p50 if b not in ROUTES)
            + ", "
            + ", ".join(f"{a}/plain {p50[a] / p50['plain']:.2f}" for a in ROUTES if a != "plain"),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
