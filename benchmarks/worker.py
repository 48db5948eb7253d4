"""One Python runtime holding one policy, timed on command: the Python side of benchmarks/run.py.

    python benchmarks/worker.py RUNTIME POLICY ARTIFACT_DIR

speaks the same line protocol as benchmarks/cpp/bench_server.cpp: one JSON command per line
on stdin, one JSON answer per line on stdout ("load", "first", "run", "memory", plus "check",
which returns this runtime's outputs on the reference inputs for the parity check).
Everything a library prints goes to stderr; answers use the original stdout.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback
from pathlib import Path

# Answers get a private copy of stdout; fd 1 then points at stderr, so stray prints from
# torch or onnx cannot corrupt the protocol.
_ANSWERS = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)

import torch  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from tensordict import TensorDictBase  # noqa: E402

from common import as_tensordict, make_inputs, memory, onnx_session  # noqa: E402
from tdaot import keys as keyutil  # noqa: E402

RUNTIMES = (
    "eager",
    "export-module",
    "torch-compile",
    "aoti-python",
    "torchscript-python",
    "onnxruntime",
    "tdaot-python-td",
    "tdaot-python",
    "tdaot-python-latency",
)


class Runtime:
    """``load()`` once; ``bind(tensors)`` returns a no-argument call on those inputs; ``outputs``
    returns the outputs as tensors in manifest order (for the parity check)."""

    def __init__(self, name: str, policy: str, artifacts: Path, info: dict) -> None:
        self.name = name
        self.policy_name = policy
        self.dir = artifacts
        self.info = info
        self.in_keys = [s["key"] for s in info["inputs"]]
        self.out_keys = [s["key"] for s in info["outputs"]]
        # Libraries are imported here, before "load" is timed: load time is model loading only.
        if name == "onnxruntime":
            import onnxruntime  # noqa: F401
        if name.startswith("tdaot"):
            import tdaot  # noqa: F401
        if name == "eager":
            import policies  # noqa: F401

    # -- loading ---------------------------------------------------------------------------
    def load(self) -> None:
        getattr(self, "_load_" + self.name.replace("-", "_"))()

    def _eager_module(self):
        from policies import POLICIES

        module, _ = POLICIES[self.policy_name]()
        module.load_state_dict(torch.load(self.dir / "weights.pt", weights_only=True))
        return module.eval()

    def _load_eager(self) -> None:
        from tdaot.builder.export import export_context

        self.module = self._eager_module()
        # Global for the worker's life: the interaction type the artifacts were built with, and
        # distribution argument validation off, as during the export.
        self._context = export_context(self.info["interaction_type"])
        self._context.__enter__()
        self._wants_td = True

    def _load_export_module(self) -> None:
        self.module = torch.export.load(str(self.dir / "program.pt2")).module()

    def _load_torch_compile(self) -> None:
        # The same graph the other runtimes run: the ExportedProgram's module, compiled by
        # inductor (tensordict modules themselves do not trace; see benchmarks/README.md).
        self.module = torch.compile(torch.export.load(str(self.dir / "program.pt2")).module())

    def _load_aoti_python(self) -> None:
        # The single-model throughput build: plain AOTInductor, as its users have it.
        self.module = torch._inductor.aoti_load_package(str(self.dir / "policy-throughput.pt2"))

    def _load_torchscript_python(self) -> None:
        self.module = torch.jit.load(str(self.dir / "policy.ts"))

    def _load_onnxruntime(self) -> None:
        self.session = onnx_session(self.dir / "policy.onnx")
        self.ort_inputs = [i.name for i in self.session.get_inputs()]

    def _load_tdaot_python(self) -> None:
        import tdaot

        self.native = tdaot.load(self.dir / "policy.pt2")

    _load_tdaot_python_td = _load_tdaot_python

    def _load_tdaot_python_latency(self) -> None:
        import tdaot

        self.native = tdaot.load(self.dir / "policy-latency.pt2")  # tdaot.build(..., tuning="latency")

    # -- calling ---------------------------------------------------------------------------
    def bind(self, tensors: list[torch.Tensor]):
        name = self.name
        if name == "eager":
            td = as_tensordict(self.in_keys, tensors)
            module = self.module

            def call():
                with torch.inference_mode():
                    return module(td)

            return call
        if name in ("export-module", "torch-compile", "torchscript-python"):
            module = self.module

            def call():
                with torch.inference_mode():
                    return module(*tensors)

            return call
        if name == "aoti-python":
            return lambda: self.module(*tensors)
        if name == "onnxruntime":
            feeds = {n: t.numpy() for n, t in zip(self.ort_inputs, tensors)}
            run = self.session.run
            return lambda: run(None, feeds)
        if name in ("tdaot-python", "tdaot-python-latency"):
            run = self.native.run_positional
            return lambda: run(*tensors)
        if name == "tdaot-python-td":
            td = as_tensordict(self.in_keys, tensors)
            native = self.native
            return lambda: native(td)
        raise ValueError(name)

    def outputs(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        result = self.bind(tensors)()
        if isinstance(result, TensorDictBase):
            return [result.get(keyutil.td_key(keyutil.from_manifest(k))) for k in self.out_keys]
        if self.name == "onnxruntime":
            return [torch.from_numpy(a) for a in result]
        if isinstance(result, torch.Tensor):
            return [result]
        return list(result)


class Server:
    def __init__(self, runtime: str, policy: str, artifacts: Path) -> None:
        info = json.loads((artifacts / "info.json").read_text())
        self.runtime = Runtime(runtime, policy, artifacts, info)
        self.specs = info["inputs"]
        self.calls: dict[int, object] = {}

    def call_for(self, batch: int):
        if batch not in self.calls:
            self.calls[batch] = self.runtime.bind(make_inputs(self.specs, batch))
        return self.calls[batch]

    def handle(self, request: dict) -> dict:
        cmd = request["cmd"]
        if cmd == "load":
            start = time.perf_counter()
            self.runtime.load()
            return {"ok": True, "seconds": time.perf_counter() - start}
        if cmd == "memory":
            return {"ok": True, **memory()}
        if cmd == "first":
            call = self.call_for(request["batch"])
            start = time.perf_counter()
            call()
            return {"ok": True, "seconds": time.perf_counter() - start}
        if cmd == "run":
            return {"ok": True, "ns": self.run(request)}
        if cmd == "check":
            reference = torch.load(request["path"], weights_only=True)
            errors = []
            for case in reference["cases"]:
                got = self.runtime.outputs(case["inputs"])
                errors.append(
                    {
                        "batch": case["inputs"][0].shape[0],
                        "max_abs_error": max(
                            float((g.double() - w.double()).abs().max())
                            if g.shape == w.shape
                            else float("inf")
                            for g, w in zip(got, case["outputs"])
                        ),
                        "outputs": len(got),
                    }
                )
            return {"ok": True, "cases": errors}
        raise ValueError(f"unknown command {cmd!r}")

    def run(self, request: dict) -> list[int]:
        call = self.call_for(request["batch"])
        iters, min_iters = request["iters"], request.get("min_iters", 1)
        budget = int(request.get("max_seconds", 1e9) * 1e9)
        clock = time.perf_counter_ns
        samples = []
        gc.collect()
        start = clock()
        for i in range(iters):
            t0 = clock()
            call()
            t1 = clock()
            samples.append(t1 - t0)
            if i + 1 >= min_iters and t1 - start > budget:
                break
        return samples


def main() -> int:
    runtime, policy, artifacts = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    torch.set_num_threads(1)
    server = Server(runtime, policy, artifacts)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            if request["cmd"] == "quit":
                break
            answer = server.handle(request)
        except Exception as err:  # noqa: BLE001 - reported to the driver, which decides
            traceback.print_exc()
            answer = {"ok": False, "error": f"{type(err).__name__}: {err}"}
        _ANSWERS.write(json.dumps(answer) + "\n")
        _ANSWERS.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
