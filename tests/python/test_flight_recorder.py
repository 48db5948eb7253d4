"""The flight recorder through Python (docs/flight-recorder.md): ``bind(batch, record=N)`` keeps
the last N runs, ``dump(path)`` and ``snapshot()`` give a ``tdaot-flightlog/1`` file whose slots
hold the bytes each run read and wrote. The file is parsed here with struct and json only, from
the format page (the reader proper is tdaot.flight_log's)."""

from __future__ import annotations

import hashlib
import json
import struct

import pytest
import torch

import tdaot


def parse(data: bytes) -> tuple[dict, dict, list[int]]:
    """(header, fields by name, the whole slots' offsets in seq order)."""
    assert data[:8] == b"TDAOTFL1"
    (header_bytes,) = struct.unpack_from("<I", data, 8)
    header = json.loads(data[16 : 16 + header_bytes])
    assert header["data_offset"] == 16 + header_bytes
    assert len(data) == header["data_offset"] + header["capacity"] * header["step_bytes"]
    fields = {f["name"]: f for f in header["fields"]}
    slots = []
    for index in range(header["capacity"]):
        at = header["data_offset"] + index * header["step_bytes"]
        (seq,) = struct.unpack_from("<Q", data, at)
        (seq_end,) = struct.unpack_from("<Q", data, at + fields["seq_end"]["offset"])
        if seq and seq == seq_end:
            slots.append((seq, at))
    return header, fields, [at for _, at in sorted(slots)]


def field_bytes(data: bytes, slot: int, field: dict, tensor: torch.Tensor) -> bytes:
    start = slot + field["offset"]
    return data[start : start + tensor.numel() * tensor.element_size()]


def test_a_dump_holds_the_bytes_each_run_read_and_wrote(tutorial, tutorial_native, tmp_path):
    b = tutorial_native.bind(batch=1, record=3)
    assert b.record == 3
    seen = []
    for step in range(5):
        b.inputs["observation"].copy_(torch.randn(1, 3) + step)
        before = {key: t.clone() for key, t in b.inputs.items()}
        b.run()
        seen.append((before, {key: t.clone() for key, t in b.outputs.items()}))
    path = tmp_path / "run.tdlog"
    b.dump(path)
    data = path.read_bytes()
    assert data == b.snapshot()
    header, fields, slots = parse(data)
    assert header["format"] == "tdaot-flightlog/1" and header["runtime"] == "full"
    assert header["package"]["sha256"] == hashlib.sha256(open(tutorial[2].path, "rb").read()).hexdigest()
    assert [key["key"] for key in header["package"]["manifest"]["inputs"]] == ["observation"]
    assert (header["model"], header["batch"], header["capacity"]) == (b.model, 1, 3)
    assert [struct.unpack_from("<Q", data, at)[0] for at in slots] == [3, 4, 5]
    for at, (inputs, outputs) in zip(slots, seen[2:]):
        for key, tensor in inputs.items():
            assert field_bytes(data, at, fields[f"inputs/{key}"], tensor) == tensor.numpy().tobytes(), key
        for key, tensor in outputs.items():
            assert field_bytes(data, at, fields[f"outputs/{key}"], tensor) == tensor.numpy().tobytes(), key


def test_resets_and_interventions_are_recorded_per_run(legged_native):
    b = legged_native.bind(batch=2, envelope=True, record=8)
    counts = []
    for step in range(4):
        b.inputs["observation"].fill_(float("nan") if step == 2 else 30.0 * (-1) ** step)
        if step == 3:
            b.reset(torch.tensor([False, True]))
        b.run()
        counts.append(dict(b.interventions))
    data = b.snapshot()
    header, fields, slots = parse(data)
    assert header["envelope"] is True and header["supervised"] is b.supervised
    assert len(slots) == 4
    names = fields["interventions"]["elements"]
    for at, expected in zip(slots, counts):
        values = struct.unpack_from("<5q", data, at + fields["interventions"]["offset"])
        assert dict(zip(names, values)) == {name: expected[name] for name in names}
    flags = [struct.unpack_from("<I", data, at + fields["flags"]["offset"])[0] for at in slots]
    assert flags[2] & 2 and not flags[0] & 2  # bit 1: the envelope held a non-finite run
    resets = [data[at + fields["reset"]["offset"] : at + fields["reset"]["offset"] + 2] for at in slots]
    assert resets == [b"\0\0", b"\0\0", b"\0\0", b"\0\1"]


def test_recording_refusals_name_what_is_at_fault(tutorial, tutorial_native, tmp_path):
    with pytest.raises(tdaot.InvalidArgumentError, match=r"BindOptions::record is -2"):
        tutorial_native.bind(batch=1, record=-2)
    plain = tutorial_native.bind(batch=1)
    assert plain.record == 0
    with pytest.raises(
        tdaot.InvalidArgumentError, match=r"does not record: bind it with BindOptions::record = N"
    ):
        plain.dump(tmp_path / "never.tdlog")
    with pytest.raises(tdaot.InvalidArgumentError, match=r"does not record"):
        plain.snapshot()
    recorded = tutorial_native.bind(batch=1, record=2)
    with pytest.raises(tdaot.TdaotError, match=r"cannot write the flight log to '/nonexistent-dir/x.tdlog'"):
        recorded.dump("/nonexistent-dir/x.tdlog")
