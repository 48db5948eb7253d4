"""Reading a flight log (``tdaot-flightlog/1``, docs/flight-recorder.md): the header checked,
every field located by the header's ``fields`` (never by fixed offsets), the ring's whole slots
taken in ``seq`` order and torn or unwritten ones skipped."""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tdaot.errors import FlightLogError, ManifestError
from tdaot.flight_log.model import FieldSpec, FlightLog, Step, SupervisorRow
from tdaot.manifest import DTYPES, Manifest

MAGIC = b"TDAOTFL1"
#: What every flight log of this reader's format starts with, before the version digit.
MAGIC_STEM = b"TDAOTFL"
FORMAT = "tdaot-flightlog/1"
PREAMBLE = 16  # magic, u32 header_bytes, u32 zero

# The header's required members and what each must be.
_HEADER_MEMBERS: dict[str, type | tuple[type, ...]] = {
    "format": str,
    "package": dict,
    "runtime": str,
    "model": str,
    "batch": int,
    "capacity": int,
    "envelope": bool,
    "supervised": bool,
    "bound_at_unix_ns": int,
    "data_offset": int,
    "step_bytes": int,
    "fields": list,
}
_PACKAGE_MEMBERS = ("path", "sha256", "manifest")
# The fields every slot has (supervisor only with a supervisor; inputs/outputs by key).
_REQUIRED_FIELDS = ("seq", "start_ns", "duration_ns", "flags", "interventions", "reset", "seq_end")

# Scalar dtypes of the bookkeeping fields and of record elements, as numpy reads them
# (little-endian); the tensors' dtypes are the manifest's (tdaot.manifest.DTYPES).
_NUMPY_DTYPES = {
    "uint64": "<u8",
    "int64": "<i8",
    "uint32": "<u4",
    "int32": "<i4",
    "uint16": "<u2",
    "int16": "<i2",
    "uint8": "u1",
    "int8": "i1",
    "float64": "<f8",
    "float32": "<f4",
    "bool": "?",
}


@dataclass(frozen=True)
class _Source:
    """The bytes of a log and how messages name them."""

    data: bytes
    name: str


def read(source: str | os.PathLike | bytes | bytearray | memoryview) -> FlightLog:
    """The flight log at ``source`` (a path), or in ``source`` (the bytes of one, as
    ``Binding.snapshot()`` returns them): its header and its whole steps in ``seq`` order.
    Raises :class:`tdaot.FlightLogError` naming the file and the fault: not a flight log (bad
    magic), another format version, a header or data shorter than it says, a header member or
    field missing or malformed."""
    src = _open(source)
    header, data_offset = _header(src)
    fields = _fields(src, header)
    manifest, manifest_problem = _manifest(src, header)
    slots = _slots(src, header, data_offset)
    columns = {spec.name: _column(slots, spec, src) for spec in fields.values()}
    seq = columns["seq"].astype(np.int64) if len(slots) else np.zeros(0, np.int64)
    whole = (seq != 0) & (columns["seq"] == columns["seq_end"])
    unwritten = int(((columns["seq"] == 0) & (columns["seq_end"] == 0)).sum())
    order = [int(i) for i in np.argsort(seq, kind="stable") if whole[i]]
    steps = tuple(_step(columns, fields, header["batch"], i) for i in order)
    package = header["package"]
    weights = _weights(src, header)
    return FlightLog(
        path=src.name,
        header=header,
        package_path=package["path"],
        package_sha256=package["sha256"],
        manifest=manifest,
        manifest_problem=manifest_problem,
        runtime=header["runtime"],
        model=header["model"],
        batch=header["batch"],
        capacity=header["capacity"],
        envelope=header["envelope"],
        supervised=header["supervised"],
        bound_at_unix_ns=header["bound_at_unix_ns"],
        fields=tuple(fields.values()),
        steps=steps,
        torn=len(slots) - len(order) - unwritten,
        unwritten=unwritten,
        supervisor=_supervisor(src, header),
        weights_sha256=weights[0],
        weights_generation=weights[1],
    )


def _open(source) -> _Source:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _Source(bytes(source), "<flight log bytes>")
    path = os.fspath(source)
    try:
        with open(path, "rb") as file:
            return _Source(file.read(), path)
    except OSError as err:
        raise FlightLogError(f"cannot read flight log {path!r}: {err.strerror or err}", path) from None


def _fail(src: _Source, problem: str) -> FlightLogError:
    return FlightLogError(f"flight log {src.name!r}: {problem}", src.name)


def _header(src: _Source) -> tuple[dict[str, Any], int]:
    data = src.data
    if data[: len(MAGIC_STEM)] != MAGIC_STEM or len(data) < len(MAGIC):
        raise _fail(src, f"not a flight log: it starts with {data[:8]!r}, not the magic {MAGIC!r}")
    if data[:8] != MAGIC:
        raise _fail(
            src,
            f"unknown format version: magic {data[:8]!r}; this tdaot reads {FORMAT} (magic {MAGIC!r})",
        )
    if len(data) < PREAMBLE:
        raise _fail(src, f"truncated header: {len(data)} bytes, shorter than the {PREAMBLE}-byte preamble")
    (header_bytes,) = struct.unpack_from("<I", data, 8)
    if len(data) < PREAMBLE + header_bytes:
        raise _fail(
            src,
            f"truncated header: the header is {header_bytes} bytes from offset {PREAMBLE}, "
            f"the file has {len(data) - PREAMBLE} after the preamble",
        )
    try:
        header = json.loads(data[PREAMBLE : PREAMBLE + header_bytes].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise _fail(src, f"the header is not UTF-8 JSON: {err}") from None
    if not isinstance(header, dict):
        raise _fail(src, f"the header is JSON {type(header).__name__}, not an object")
    if header.get("format") != FORMAT:
        raise _fail(
            src,
            f"unknown format version {header.get('format')!r}: this tdaot reads {FORMAT!r}",
        )
    for name, kind in _HEADER_MEMBERS.items():
        if name not in header:
            raise _fail(src, f"the header has no member {name!r}")
        value = header[name]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise _fail(src, f"header member {name!r} is {value!r}, expected a JSON {_kind(kind)}")
    for name in _PACKAGE_MEMBERS:
        if name not in header["package"]:
            raise _fail(src, f"the header's 'package' has no member {name!r}")
    for name in ("batch", "capacity", "step_bytes"):
        if header[name] <= 0:
            raise _fail(src, f"header member {name!r} is {header[name]}, expected a count > 0")
    data_offset = header["data_offset"]
    if data_offset < PREAMBLE + header_bytes:
        raise _fail(
            src, f"'data_offset' {data_offset} lies inside the header (it ends at {PREAMBLE + header_bytes})"
        )
    return header, data_offset


def _supervisor(src: _Source, header: dict[str, Any]) -> dict[str, Any] | None:
    """The header's "supervisor" (absent in a log from before it was recorded): null exactly
    when the log is not supervised."""
    supervisor = header.get("supervisor")
    if supervisor is not None and not isinstance(supervisor, dict):
        raise _fail(src, f"header member 'supervisor' is {supervisor!r}, expected a JSON object or null")
    if "supervisor" in header and (supervisor is not None) != header["supervised"]:
        raise _fail(
            src, f"header member 'supervisor' is {supervisor!r} but 'supervised' is {header['supervised']}"
        )
    return supervisor


def _weights(src: _Source, header: dict[str, Any]) -> tuple[str | None, int | None]:
    """The header's "weights" {sha256, generation}, or (None, None) in a log from before them."""
    if "weights" not in header:
        return None, None
    weights = header["weights"]
    generation = weights.get("generation") if isinstance(weights, dict) else None
    if (
        not isinstance(weights, dict)
        or not isinstance(weights.get("sha256"), str)
        or not isinstance(generation, int)
        or isinstance(generation, bool)
        or generation < 0
    ):
        expected = "{sha256: string, generation: count}"
        raise _fail(src, f"header member 'weights' is {weights!r}, expected {expected}")
    return weights["sha256"], generation


def _kind(kind) -> str:
    names = {str: "string", dict: "object", int: "integer", bool: "boolean", list: "array"}
    return names.get(kind, getattr(kind, "__name__", str(kind)))


def _fields(src: _Source, header: dict[str, Any]) -> dict[str, FieldSpec]:
    fields: dict[str, FieldSpec] = {}
    step_bytes = header["step_bytes"]
    for index, entry in enumerate(header["fields"]):
        where = f"header field {index}"
        if not isinstance(entry, dict):
            raise _fail(src, f"{where} is {entry!r}, not an object")
        for member in ("name", "offset", "dtype", "shape"):
            if member not in entry:
                raise _fail(src, f"{where} ({entry.get('name', '?')!r}) has no member {member!r}")
        name, offset, dtype, shape = entry["name"], entry["offset"], entry["dtype"], entry["shape"]
        where = f"header field {name!r}"
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise _fail(src, f"{where}: shape {shape!r} is not a list of sizes")
        elements = tuple(entry.get("elements", ()))
        spec = FieldSpec(
            name=name,
            offset=offset,
            dtype=dtype,
            shape=tuple(shape),
            key=entry.get("key"),
            kind=entry.get("kind"),
            elements=elements,
        )
        size = _field_bytes(src, spec)
        if not isinstance(offset, int) or offset < 0 or offset + size > step_bytes:
            raise _fail(
                src, f"{where}: offset {offset!r} + {size} bytes lies outside a {step_bytes}-byte slot"
            )
        if spec.kind in ("input", "output") and not spec.key:
            raise _fail(src, f"{where}: an {spec.kind} field without its 'key'")
        fields[name] = spec
    for name in _REQUIRED_FIELDS:
        if name not in fields:
            raise _fail(src, f"the header's 'fields' has no field {name!r}")
    return fields


def _record_dtype(src: _Source, spec: FieldSpec) -> np.dtype:
    """A record field's element layout: "name:dtype" entries, packed in order."""
    parts = []
    for element in spec.elements:
        name, _, dtype = element.partition(":")
        if dtype not in _NUMPY_DTYPES:
            raise _fail(
                src, f"header field {spec.name!r}: element {element!r} is not NAME:DTYPE of a known dtype"
            )
        parts.append((name, _NUMPY_DTYPES[dtype]))
    if not parts:
        raise _fail(src, f"header field {spec.name!r}: a record field without 'elements'")
    return np.dtype(parts)


def _element_bytes(src: _Source, spec: FieldSpec) -> int:
    if spec.dtype == "record":
        return _record_dtype(src, spec).itemsize
    if spec.dtype in DTYPES:
        return torch.empty(0, dtype=DTYPES[spec.dtype]).element_size()
    if spec.dtype in _NUMPY_DTYPES:
        return np.dtype(_NUMPY_DTYPES[spec.dtype]).itemsize
    raise _fail(src, f"header field {spec.name!r}: unknown dtype {spec.dtype!r}")


def _field_bytes(src: _Source, spec: FieldSpec) -> int:
    return _element_bytes(src, spec) * int(np.prod(spec.shape, dtype=np.int64))


def _manifest(src: _Source, header: dict[str, Any]) -> tuple[Manifest | None, str]:
    data = header["package"]["manifest"]
    try:
        return Manifest.from_dict(data, src.name), ""
    except ManifestError as err:
        return None, str(err)


def _slots(src: _Source, header: dict[str, Any], data_offset: int) -> np.ndarray:
    capacity, step_bytes = header["capacity"], header["step_bytes"]
    end = data_offset + capacity * step_bytes
    if len(src.data) < end:
        raise _fail(
            src,
            f"truncated data: {capacity} slots of {step_bytes} bytes from offset {data_offset} end at "
            f"{end}, the file has {len(src.data)} bytes",
        )
    return np.frombuffer(src.data, dtype=np.uint8, count=capacity * step_bytes, offset=data_offset).reshape(
        capacity, step_bytes
    )


def _column(slots: np.ndarray, spec: FieldSpec, src: _Source):
    """One field of every slot: numpy for the bookkeeping fields (seq, counts, records), a torch
    tensor [capacity, *shape] of the recorded dtype for the inputs and outputs."""
    size = _field_bytes(src, spec)
    raw = np.ascontiguousarray(slots[:, spec.offset : spec.offset + size])
    count = slots.shape[0]
    if spec.kind in ("input", "output"):
        if spec.dtype not in DTYPES:
            raise _fail(src, f"header field {spec.name!r}: dtype {spec.dtype!r} is not a tensor dtype")
        flat = torch.from_numpy(raw.copy()).view(DTYPES[spec.dtype])
        return flat.reshape(count, *spec.shape)
    if spec.dtype == "record":
        return raw.view(_record_dtype(src, spec)).reshape(count, *spec.shape)
    if spec.dtype not in _NUMPY_DTYPES:
        raise _fail(src, f"header field {spec.name!r}: dtype {spec.dtype!r} is not a bookkeeping dtype")
    return raw.view(_NUMPY_DTYPES[spec.dtype]).reshape(count, *spec.shape)


def _step(columns: Mapping[str, Any], fields: Mapping[str, FieldSpec], batch: int, i: int) -> Step:
    counts = columns["interventions"][i].reshape(-1)
    names = fields["interventions"].elements or tuple(f"{n}" for n in range(len(counts)))
    supervisor = None
    if "supervisor" in fields:
        supervisor = tuple(SupervisorRow.from_record(row) for row in columns["supervisor"][i].reshape(-1))
    inputs, outputs = {}, {}
    for spec in fields.values():
        if spec.kind == "input":
            inputs[spec.key] = columns[spec.name][i]
        elif spec.kind == "output":
            outputs[spec.key] = columns[spec.name][i]
    return Step(
        seq=int(columns["seq"][i]),
        start_ns=int(columns["start_ns"][i]),
        duration_ns=int(columns["duration_ns"][i]),
        flags=int(columns["flags"][i]),
        interventions={name: int(v) for name, v in zip(names, counts)},
        reset=torch.from_numpy(columns["reset"][i].reshape(-1)[:batch].astype(bool)),
        supervisor=supervisor,
        inputs=inputs,
        outputs=outputs,
        weights_generation=int(columns["weights_generation"][i]) if "weights_generation" in columns else None,
    )
