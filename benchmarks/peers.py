"""OpenVINO and ExecuTorch (XNNPACK): their artifacts from the ExportedProgram tdaot builds from,
checked against eager, and their Python calls (benchmarks/alternate.py).

    python benchmarks/peers.py ARTIFACT_DIR   # build and check from program.pt2 and check.pt

Settings, one thread each (benchmarks/README.md): OpenVINO's CPU plugin with OPENVINO_CONFIG
(f32 forced: its default on a CPU with bf16 support is bf16); ExecuTorch's XNNPACK partitioner,
its threadpool reset to one thread. ExecuTorch plans its memory for static shapes, so its
program is exported once per timed batch (``policy-b{batch}.pte``) from the program's module.
What each peer made, or why it could not, goes to ``peers.json`` beside the artifacts: a peer
that cannot run a policy gets a row saying so, not a gap.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent

PEERS = ("openvino", "executorch")
LABELS = {"openvino": "OpenVINO", "executorch": "ExecuTorch (XNNPACK)"}
OPENVINO_CONFIG = {
    "INFERENCE_NUM_THREADS": "1",
    "NUM_STREAMS": "1",
    "PERFORMANCE_HINT": "LATENCY",
    "INFERENCE_PRECISION_HINT": "f32",
}


def _error(err: BaseException) -> str:
    return f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"[:400]


def build_openvino(program, out: Path) -> dict:
    """``openvino.convert_model`` on the ExportedProgram, saved as IR (policy.xml/.bin, f32
    weights) so the C++ server reads the same files; the ONNX file if the program fails."""
    import openvino as ov

    start = time.perf_counter()
    try:
        model, source = ov.convert_model(program), "ExportedProgram"
    except Exception as err:  # noqa: BLE001 - fall back, and say so
        print(f"openvino: ExportedProgram failed ({_error(err)}); converting policy.onnx", file=sys.stderr)
        model, source = ov.convert_model(str(out / "policy.onnx")), "ONNX"
    ov.save_model(model, str(out / "policy.xml"), compress_to_fp16=False)
    return {"file": "policy.xml", "source": source, "seconds": time.perf_counter() - start,
            "bytes": sum((out / f).stat().st_size for f in ("policy.xml", "policy.bin"))}  # fmt: skip


def build_executorch(program, specs: list[dict], batches: list[int], out: Path) -> dict:
    """One XNNPACK-lowered .pte per batch: the program's module exported at that static batch."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from common import make_inputs

    start = time.perf_counter()
    files, portable = {}, set()
    module = program.module()
    for batch in batches:
        static = torch.export.export(module, tuple(make_inputs(specs, batch)))
        edge = to_edge_transform_and_lower(static, partitioner=[XnnpackPartitioner()])
        # What XNNPACK did not take runs on ExecuTorch's portable kernels: said in the results.
        for node in edge.exported_program().graph.nodes:
            target = str(node.target).split(">")[0].split(": ")[-1]  # "<EdgeOpOverload: aten.x.y>: ..."
            if node.op == "call_function" and "delegate" not in target and "getitem" not in target:
                portable.add(target)
        name = f"policy-b{batch}.pte"
        (out / name).write_bytes(edge.to_executorch().buffer)
        files[str(batch)] = name
    return {"files": files, "portable_ops": sorted(portable), "seconds": time.perf_counter() - start,
            "bytes": sum((out / f).stat().st_size for f in files.values())}  # fmt: skip


def load(name: str, artifacts: Path, status: dict):
    """A loaded peer: a function (tensors) -> zero-argument call returning its outputs."""
    if name == "openvino":
        import openvino as ov

        compiled = ov.Core().compile_model(str(artifacts / status["file"]), "CPU", OPENVINO_CONFIG)
        request = compiled.create_infer_request()

        def bind(tensors):
            feeds = {i: t.numpy() for i, t in enumerate(tensors)}
            return lambda: list(request.infer(feeds, share_inputs=True, share_outputs=True).values())

        return bind
    from executorch.extension.pybindings import portable_lib

    portable_lib._unsafe_reset_threadpool(1)
    files = status["files"].items()
    modules = {int(b): portable_lib._load_for_executorch(str(artifacts / f)) for b, f in files}

    def bind(tensors):
        batch = tensors[0].shape[0]
        if batch not in modules:
            raise ValueError(f"no .pte for batch {batch} (exported at {sorted(modules)})")
        module, inputs = modules[batch], tuple(tensors)
        return lambda: module.forward(inputs)

    return bind


def read_status(artifacts: Path) -> dict[str, dict]:
    """Each peer's peers.json entry for one policy's artifacts, or an error saying why there is none."""
    path = artifacts / "peers.json"
    status = json.loads(path.read_text()) if path.is_file() else {}
    missing = {"error": "not built (no peers.json: artifacts from before issue 42)"}
    return {name: status.get(name, missing) for name in PEERS}


def max_abs_error(bind, cases: list[dict]) -> float:
    import numpy as np
    import torch

    worst = 0.0
    for case in cases:
        got = bind([t.contiguous() for t in case["inputs"]])()
        for mine, want in zip(got, case["outputs"], strict=True):
            mine = torch.as_tensor(np.asarray(mine)) if not isinstance(mine, torch.Tensor) else mine
            worst = max(worst, (mine.double() - want.double()).abs().max().item())
    return worst


def build_all(
    program, specs: list[dict], batches: list[int], out: Path, cases: list[dict], only: tuple = PEERS
) -> dict:
    """Every peer's artifact (of ``only``), its parity against eager on ``cases``, or the error that
    stopped it; written to out/peers.json and returned."""
    sys.path.insert(0, str(HERE))
    status: dict[str, dict] = {}
    for name in only:
        try:
            if name == "openvino":
                status[name] = build_openvino(program, out)
            else:
                status[name] = build_executorch(program, specs, batches, out)
            status[name]["max_abs_error"] = max_abs_error(load(name, out, status[name]), cases)
        except Exception as err:  # noqa: BLE001 - a peer that cannot run the policy gets a row
            traceback.print_exc()
            status[name] = {"error": _error(err)}
    (out / "peers.json").write_text(json.dumps(status, indent=2) + "\n")
    return status


def main() -> int:
    import torch

    artifacts = Path(sys.argv[1])
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent))
    from policies import timed_batches

    torch.set_num_threads(1)
    info = json.loads((artifacts / "info.json").read_text())
    program = torch.export.load(str(artifacts / "program.pt2"))
    cases = torch.load(artifacts / "check.pt")["cases"]
    status = build_all(program, info["inputs"], list(timed_batches(info["policy"])), artifacts, cases)
    print(json.dumps(status, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
