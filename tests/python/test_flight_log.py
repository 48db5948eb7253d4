"""tdaot.flight_log.read: the file format of docs/flight-recorder.md read by the header's fields,
whole slots in seq order (torn and unwritten ones skipped), and each fault refused naming the file."""

from __future__ import annotations

import json
import struct

import pytest
import torch
from flight_log_writer import write

import tdaot
from tdaot.flight_log import read

BATCH = 2
INPUTS = {"obs": ("float32", [BATCH, 3]), "is_init": ("bool", [BATCH, 1])}
OUTPUTS = {"action": ("float64", [BATCH, 2]), "count": ("int64", [BATCH])}


def _step(seq: int, **changes) -> dict:
    step = {
        "seq": seq,
        "start_ns": 20_000_000 * seq,
        "duration_ns": 1000 + seq,
        "flags": 0,
        "interventions": [0, seq, 0, 0, 0],
        "reset": [seq == 3, False],
        "inputs": {
            "obs": torch.arange(6, dtype=torch.float32).reshape(BATCH, 3) + seq,
            "is_init": torch.tensor([[seq == 3], [False]]),
        },
        "outputs": {
            "action": torch.full((BATCH, 2), seq / 3, dtype=torch.float64),
            "count": torch.tensor([seq, -seq]),
        },
    }
    step.update(changes)
    return step


def _log(path, steps=None, **options) -> bytes:
    steps = steps if steps is not None else [_step(s) for s in range(1, 5)]
    return write(path, manifest={}, batch=BATCH, steps=steps, inputs=INPUTS, outputs=OUTPUTS, **options)


def test_whole_slots_read_in_seq_order_by_the_headers_fields(tmp_path):
    path = tmp_path / "ring.tdlog"
    # A ring of 6 slots: steps 3..6 written in slots 2, 3, 4, 5; slot 0 torn (seq 7 being written
    # over it), slot 1 never written.
    steps = [_step(s) for s in (3, 4, 5, 6)] + [_step(7, seq_end=1)]
    _log(path, steps, capacity=6, slot_order=[2, 3, 4, 5, 0], supervised=True)
    log = read(path)
    assert [step.seq for step in log.steps] == [3, 4, 5, 6]
    assert (log.torn, log.unwritten, log.capacity, log.batch) == (1, 1, 6, BATCH)
    assert log.input_keys == ["obs", "is_init"] and log.output_keys == ["action", "count"]
    first = log.steps[0]
    assert first.inputs["obs"].dtype == torch.float32 and first.inputs["obs"].shape == (BATCH, 3)
    assert torch.equal(first.inputs["obs"], _step(3)["inputs"]["obs"])
    assert first.inputs["is_init"].dtype == torch.bool and first.inputs["is_init"].tolist() == [
        [True],
        [False],
    ]
    assert torch.equal(first.outputs["action"], torch.full((BATCH, 2), 1.0, dtype=torch.float64))
    assert first.outputs["count"].tolist() == [3, -3]
    assert first.reset.tolist() == [True, False]
    assert dict(first.interventions) == {
        "nonfinite": 0,
        "rate_limited": 3,
        "blended": 0,
        "clipped": 0,
        "fallback": 0,
    }
    assert (first.start_ns, first.duration_ns) == (60_000_000, 1003)
    assert first.supervisor[0].mode == "running" and first.supervisor[0].blend == 1.0
    assert log.series("action").shape == (4, BATCH, 2)
    assert log.gaps() == [] and log.wall_ns(first) == 1764403200000000000 + 60_000_000
    # The package's manifest is read when it is one; this header's is not.
    assert log.manifest is None and log.manifest_problem


def test_a_gap_between_whole_steps_is_reported_and_bytes_read_like_a_file(tmp_path):
    data = _log(tmp_path / "gap.tdlog", [_step(1), _step(2), _step(5)], capacity=4)
    log = read(data)
    assert log.path == "<flight log bytes>"
    assert [s.seq for s in log.steps] == [1, 2, 5] and log.gaps() == [(2, 5)]


def test_fields_are_taken_from_the_header_in_its_order_wherever_they_lie(tmp_path):
    """The header lists the fields in another order (the slot's bytes unchanged): the keys come in
    the header's order and each value from its own offset."""
    data = bytearray(_log(tmp_path / "fields.tdlog"))
    (size,) = struct.unpack_from("<I", data, 8)
    header = json.loads(data[16 : 16 + size])
    header["fields"] = list(reversed(header["fields"]))
    text = json.dumps(header).encode()
    data[16 : 16 + size] = text + b" " * (size - len(text))
    log = read(bytes(data))
    assert [s.seq for s in log.steps] == [1, 2, 3, 4]
    assert log.input_keys == ["is_init", "obs"]
    assert torch.equal(log.steps[1].inputs["obs"], _step(2)["inputs"]["obs"])
    assert log.steps[1].outputs["count"].tolist() == [2, -2]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: b"PK\x03\x04" + d[4:], r"not a flight log: it starts with b'PK\\x03\\x04"),
        (lambda d: b"TDAOTFL2" + d[8:], r"unknown format version: magic b'TDAOTFL2'"),
        (lambda d: d[:12], r"truncated header: 12 bytes, shorter than the 16-byte preamble"),
        (lambda d: d[:200], r"truncated header: the header is \d+ bytes from offset 16, the file has 184"),
        (lambda d: d[:-1], r"truncated data: 4 slots of \d+ bytes from offset \d+ end at \d+, the file has"),
    ],
    ids=["magic", "version", "preamble", "header", "data"],
)
def test_a_damaged_file_is_refused_naming_it_and_the_fault(tmp_path, damage, message):
    path = tmp_path / "bad.tdlog"
    path.write_bytes(damage(_log(tmp_path / "good.tdlog")))
    with pytest.raises(tdaot.FlightLogError, match=message) as raised:
        read(path)
    assert str(path) in str(raised.value) and raised.value.path == str(path)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"format": "tdaot-flightlog/2"}, r"unknown format version 'tdaot-flightlog/2': this tdaot reads"),
        ({"capacity": None}, r"header member 'capacity' is None, expected a JSON integer"),
        ({"package": {"path": "p.pt2", "manifest": {}}}, r"the header's 'package' has no member 'sha256'"),
    ],
    ids=["format", "capacity", "sha256"],
)
def test_a_header_with_a_wrong_member_is_refused(tmp_path, changes, message):
    path = tmp_path / "header.tdlog"
    _log(path, header_changes=changes)
    with pytest.raises(tdaot.FlightLogError, match=message):
        read(path)


@pytest.mark.parametrize("member", ["fields", "step_bytes", "bound_at_unix_ns"])
def test_a_header_missing_a_member_is_refused_naming_it(tmp_path, member):
    data = bytearray(_log(tmp_path / "full.tdlog"))
    (size,) = struct.unpack_from("<I", data, 8)
    header = json.loads(data[16 : 16 + size])
    del header[member]
    text = json.dumps(header).encode()
    data[16 : 16 + size] = text + b" " * (size - len(text))
    with pytest.raises(
        tdaot.FlightLogError, match=rf"'<flight log bytes>': the header has no member '{member}'"
    ):
        read(bytes(data))


def test_a_header_missing_a_field_or_placing_one_outside_the_slot_is_refused(tmp_path):
    data = bytearray(_log(tmp_path / "full.tdlog"))
    (size,) = struct.unpack_from("<I", data, 8)
    header = json.loads(data[16 : 16 + size])

    def with_fields(fields) -> bytes:
        text = json.dumps({**header, "fields": fields}).encode()
        return bytes(data[:16]) + text + b" " * (size - len(text)) + bytes(data[16 + size :])

    without = [f for f in header["fields"] if f["name"] != "seq_end"]
    with pytest.raises(tdaot.FlightLogError, match="the header's 'fields' has no field 'seq_end'"):
        read(with_fields(without))
    outside = [{**f, "offset": header["step_bytes"]} if f["name"] == "flags" else f for f in header["fields"]]
    with pytest.raises(
        tdaot.FlightLogError, match=r"header field 'flags': offset \d+ \+ 4 bytes lies outside"
    ):
        read(with_fields(outside))
    unknown = [{**f, "dtype": "complex32"} if f["name"] == "outputs/action" else f for f in header["fields"]]
    with pytest.raises(
        tdaot.FlightLogError, match="header field 'outputs/action': unknown dtype 'complex32'"
    ):
        read(with_fields(unknown))


def test_an_absent_file_is_refused_naming_it(tmp_path):
    with pytest.raises(tdaot.FlightLogError, match=r"cannot read flight log '.*absent.tdlog'"):
        read(tmp_path / "absent.tdlog")


def test_the_commands_refuse_a_file_that_is_not_a_flight_log_naming_it(tmp_path, capsys):
    from tdaot.cli import main as cli

    path = tmp_path / "policy.pt2"
    path.write_bytes(b"PK\x03\x04" + bytes(60))
    for command in (["log", "show"], ["replay"]):
        assert cli([*command, str(path)]) == 1
        err = capsys.readouterr().err
        assert f"FlightLogError: flight log '{path}': not a flight log" in err, err
    assert cli(["log", "export", str(path), "--mcap", str(tmp_path / "out.mcap")]) == 1
    assert not (tmp_path / "out.mcap").exists()
