"""Flight logs for the tests. :func:`record_run` runs a real binding with the C++ flight recorder
(``bind(record=N)``) and dumps its log: the replay, show and export tests read those. :func:`write`
lays out ``tdaot-flightlog/1`` (docs/flight-recorder.md) from Python, for what the recorder cannot
be made to write: the reader's tests of damaged files and of a header in another field order,
and a package manifest whose contract has observation terms (no test package has one)."""

from __future__ import annotations

import json
import struct

import numpy as np
import torch

MAGIC = b"TDAOTFL1"
INTERVENTIONS = ("nonfinite", "rate_limited", "blended", "clipped", "fallback")
SUPERVISOR_ELEMENTS = (
    "mode:int32",
    "pad:int32",
    "gain_scale:float64",
    "damping_scale:float64",
    "blend:float64",
    "steps:int64",
)


def _align(n: int) -> int:
    return (n + 7) // 8 * 8


def layout(inputs: dict, outputs: dict, batch: int, supervised: bool) -> tuple[list[dict], int]:
    """The header's fields and step_bytes for inputs/outputs {key: (dtype, [batch, *shape])}."""
    fields, offset = [], 0

    def add(entry: dict, size: int) -> None:
        nonlocal offset
        fields.append({**entry, "offset": offset})
        offset = _align(offset + size)

    add({"name": "seq", "dtype": "uint64", "shape": []}, 8)
    add({"name": "start_ns", "dtype": "int64", "shape": []}, 8)
    add({"name": "duration_ns", "dtype": "int64", "shape": []}, 8)
    add({"name": "flags", "dtype": "uint32", "shape": []}, 4)
    add({"name": "interventions", "dtype": "int64", "shape": [5], "elements": list(INTERVENTIONS)}, 40)
    add({"name": "reset", "dtype": "uint8", "shape": [batch]}, batch)
    if supervised:
        add(
            {
                "name": "supervisor",
                "dtype": "record",
                "shape": [batch],
                "elements": list(SUPERVISOR_ELEMENTS),
            },
            40 * batch,
        )
    for kind, specs in (("input", inputs), ("output", outputs)):
        for key, (dtype, shape) in specs.items():
            size = torch.empty(0, dtype=getattr(torch, dtype)).element_size() * int(np.prod(shape))
            add(
                {"name": f"{kind}s/{key}", "key": key, "kind": kind, "dtype": dtype, "shape": list(shape)},
                size,
            )
    add({"name": "seq_end", "dtype": "uint64", "shape": []}, 8)
    return fields, offset


def write(
    path,
    *,
    manifest: dict,
    batch: int,
    steps: list[dict],
    inputs: dict,
    outputs: dict,
    capacity: int | None = None,
    envelope: bool = False,
    supervised: bool = False,
    header_changes: dict | None = None,
    slot_order: list[int] | None = None,
) -> bytes:
    """Writes a log of ``steps`` (each {"seq", "start_ns", "duration_ns", "flags",
    "interventions": [5], "reset": [batch], "inputs": {key: tensor}, "outputs": {key: tensor},
    optional "seq_end"}) in slots ``slot_order`` (default: in order); returns its bytes."""
    fields, step_bytes = layout(inputs, outputs, batch, supervised)
    capacity = capacity or len(steps)
    header = {
        "format": "tdaot-flightlog/1",
        "package": {"path": "policy.pt2", "sha256": "0" * 64, "manifest": manifest},
        "runtime": "full",
        "model": "b1",
        "batch": batch,
        "capacity": capacity,
        "envelope": envelope,
        "supervised": supervised,
        "bound_at_unix_ns": 1764403200000000000,
        "data_offset": 0,
        "step_bytes": step_bytes,
        "fields": fields,
    }
    header.update(header_changes or {})
    text = json.dumps(header).encode()
    data_offset = _align(16 + len(text) + 64)
    if "data_offset" not in (header_changes or {}):
        header["data_offset"] = data_offset
        text = json.dumps(header).encode()
    text += b" " * (_align(16 + len(text)) - 16 - len(text))
    data = bytearray(max(data_offset, header["data_offset"]) + capacity * step_bytes)
    data[:8] = MAGIC
    data[8:16] = struct.pack("<II", len(text), 0)
    data[16 : 16 + len(text)] = text
    by_name = {f["name"]: f for f in fields}
    order = slot_order or list(range(len(steps)))
    for slot, step in zip(order, steps):
        base = header["data_offset"] + slot * step_bytes

        def put(name: str, raw: bytes, base: int = base) -> None:
            start = base + by_name[name]["offset"]
            data[start : start + len(raw)] = raw

        put("seq", struct.pack("<Q", step["seq"]))
        put("start_ns", struct.pack("<q", step["start_ns"]))
        put("duration_ns", struct.pack("<q", step["duration_ns"]))
        put("flags", struct.pack("<I", step.get("flags", 0)))
        put("interventions", struct.pack("<5q", *step.get("interventions", [0] * 5)))
        put("reset", bytes(int(bool(r)) for r in step.get("reset", [0] * batch)))
        if supervised:
            rows = step.get("supervisor", [(0, 1.0, 1.0, 1.0, 0)] * batch)
            put("supervisor", b"".join(struct.pack("<iidddq", m, 0, g, d, b, s) for m, g, d, b, s in rows))
        for kind in ("inputs", "outputs"):
            for key, tensor in step[kind].items():
                put(f"{kind}/{key}", tensor.contiguous().view(torch.uint8).numpy().tobytes())
        put("seq_end", struct.pack("<Q", step.get("seq_end", step["seq"])))
    with open(path, "wb") as file:
        file.write(bytes(data))
    return bytes(data)


def record_run(
    native,
    path,
    *,
    batch: int,
    steps: int,
    inputs_for,
    resets: dict | None = None,
    envelope: bool = False,
    supervisor=False,
    capacity: int | None = None,
) -> dict:
    """Runs ``native`` bound at ``batch`` with the C++ flight recorder (``record=capacity``,
    default ``steps``) for ``steps`` steps (``inputs_for(i)`` gives step i's inputs by manifest
    key, ``resets[i]`` a bool [batch] mask reset before step i) and dumps its log at ``path``.
    Returns {"outputs": [per step {key: tensor}]}."""
    binding = native.bind(batch, envelope=envelope, supervisor=supervisor, record=capacity or steps)
    outputs = []
    for i in range(steps):
        if resets and i in resets:
            binding.reset(resets[i].clone())
        for key, value in inputs_for(i).items():
            binding.inputs[key].copy_(value)
        binding.run()
        outputs.append({key: binding.outputs[key].clone() for key in native.manifest.output_keys})
    binding.dump(str(path))
    return {"outputs": outputs}
