"""Helpers shared by the benchmark's build step and its Python workers."""

from __future__ import annotations

from pathlib import Path

import torch
from tensordict import TensorDict

from tdaot import keys as keyutil


def make_inputs(specs: list[dict], batch: int, seed: int | None = None) -> list[torch.Tensor]:
    """Seeded inputs (``seed``, by default ``batch``) for every manifest input at ``batch``, like
    the C++ server makes them: normal floats, full-range bytes, false flags (is_init false: a
    recurrent policy's steady state)."""
    torch.manual_seed(batch if seed is None else seed)
    tensors = []
    for spec in specs:
        shape = (batch, *spec["shape"])
        dtype = getattr(torch, spec["dtype"])
        if dtype == torch.bool:
            tensors.append(torch.zeros(shape, dtype=dtype))
        elif dtype == torch.uint8:
            tensors.append(torch.randint(0, 256, shape, dtype=dtype))
        elif not dtype.is_floating_point:
            tensors.append(torch.randint(0, 10, shape, dtype=dtype))
        else:
            tensors.append(torch.randn(shape, dtype=dtype))
    return tensors


def onnx_session(path: Path, profile_prefix: str | None = None):
    """ONNX Runtime's CPU session of ``path`` as the benchmark runs it: one thread, sequential
    (``profile_prefix``: with ONNX Runtime's profiler on, its trace file named from it)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def onnx_call(session, tensors: list[torch.Tensor]):
    """A zero-argument call running ONNX Runtime ``session`` (``onnx_session``) on ``tensors``."""
    feeds = {i.name: t.numpy() for i, t in zip(session.get_inputs(), tensors)}
    return lambda: session.run(None, feeds)


def as_tensordict(keys: list[str], tensors: list[torch.Tensor]) -> TensorDict:
    """A TensorDict holding ``tensors`` under the (dot-joined) manifest ``keys``."""
    return TensorDict(
        {keyutil.td_key(keyutil.from_manifest(k)): t for k, t in zip(keys, tensors)},
        batch_size=[tensors[0].shape[0]],
    )


def memory() -> dict:
    """This process's resident set now and at its peak (VmRSS, VmHWM), in KiB."""
    out = {}
    with open("/proc/self/status") as status:
        for line in status:
            for field in ("VmRSS", "VmHWM"):
                if line.startswith(field + ":"):
                    out[field + "_kib"] = int(line.split()[1])
    return out


def cpu_description() -> str:
    """The CPU as figures should name it: its model name, family/model and widest vector ISA
    (one vendor's machines here came with AVX-512, AMX, or AVX2 only, and the winning kernels
    differ between them)."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        return "unknown CPU"
    flags = set(fields.get("flags", "").split())
    isa = next((name for name in ("amx_tile", "avx512f", "avx2") if name in flags), "no AVX2")
    return (
        f"{fields.get('model name', 'unknown CPU')} (family {fields.get('cpu family', '?')}, "
        f"model {fields.get('model', '?')}, {isa.replace('_tile', '').upper()})"
    )


def fmt_time_us(us: float | None) -> str:
    if us is None:
        return "–"
    if us < 1e3:
        return f"{us:.1f} µs"
    if us < 1e6:
        return f"{us / 1e3:.2f} ms"
    return f"{us / 1e6:.2f} s"
