"""A flight log written as MCAP (``tdaot log export LOG --mcap OUT``) with the ``mcap`` library,
for Foxglove and the tools that read MCAP.

One channel per recorded input and output (topics ``/inputs/<key>``, ``/outputs/<key>``) and one
of step metadata (``/step``), each with a JSON schema (encoding ``jsonschema``) and JSON messages,
one message per step, logged at ``bound_at_unix_ns + start_ns`` (the step's wall time). A message
holds the step's ``seq`` and its ``rows``: per row an object of the row's elements by name, the
contract's where it has them (joints by name; an observation of terms as one object per term,
its elements by name, "@-1" marking older steps of a term's history), else by index ("0", "1",
...). A non-finite value is ``null`` (JSON has no NaN); a bool is a JSON bool."""

from __future__ import annotations

import json
import math
import os
from typing import Any

import torch

from tdaot.flight_log.model import FlightLog
from tdaot.flight_log.names import element_names, term_groups
from tdaot.optional import MCAP, require

#: The step channel's topic.
STEP_TOPIC = "/step"
PROFILE = ""  # no ROS profile: JSON channels


def topic(key: str, kind: str) -> str:
    """The channel topic of input or output ``key``."""
    return f"/{kind}s/{key}"


def _number_schema(dtype: str) -> dict[str, Any]:
    if dtype == "bool":
        return {"type": "boolean"}
    if dtype.startswith(("int", "uint")):
        return {"type": "integer"}
    return {"type": ["number", "null"]}


def _row_schema(log: FlightLog, key: str, kind: str) -> dict[str, Any]:
    spec = log.spec(key, kind)
    value = _number_schema(spec.dtype)
    groups = term_groups(log, key, kind)
    if groups is not None:
        properties = {
            term: {
                "type": "object",
                "description": f"observation term {term.split('#')[0]}: "
                f"elements {elements[0][1]}..{elements[-1][1]} of the key",
                "properties": {name: value for name, _ in elements},
            }
            for term, elements in groups
        }
    else:
        properties = {name: value for name in element_names(log, key, kind)}
    return {"type": "object", "properties": properties}


def key_schema(log: FlightLog, key: str, kind: str) -> dict[str, Any]:
    """The JSON schema of the messages of input or output ``key``."""
    spec = log.spec(key, kind)
    return {
        "title": f"tdaot {kind} {key}",
        "description": f"{kind} {key!r}, {spec.dtype} {list(spec.shape)} per step ({spec.shape[0]} rows)",
        "type": "object",
        "properties": {
            "seq": {"type": "integer", "description": "the step's number since bind, from 1"},
            "rows": {"type": "array", "items": _row_schema(log, key, kind)},
        },
    }


def step_schema(log: FlightLog) -> dict[str, Any]:
    """The JSON schema of the ``/step`` messages."""
    counts = log.steps[0].interventions if log.steps else {}
    properties: dict[str, Any] = {
        "seq": {"type": "integer"},
        "start_ns": {"type": "integer", "description": "steady clock since bind"},
        "duration_ns": {"type": "integer"},
        "duration_us": {"type": "number"},
        "flags": {"type": "integer"},
        "threw": {"type": "boolean"},
        "nonfinite": {"type": "boolean"},
        "rate_limited": {"type": "boolean"},
        "interventions": {
            "type": "object",
            "description": "the binding's counts after the step",
            "properties": {name: {"type": "integer"} for name in counts},
        },
        "reset": {"type": "array", "items": {"type": "boolean"}, "description": "rows reset before the step"},
    }
    if log.weights_generation is not None:
        properties["weights_generation"] = {
            "type": "integer",
            "description": "the weights the step ran: the bind's generation, +1 per swap or rollback since",
        }
        properties["weights_changing"] = {
            "type": "boolean",
            "description": "weights were made live during the step",
        }
    if log.supervised:
        properties["supervisor"] = {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "mode": {"type": "string", "enum": ["running", "blending", "held", "damped"]},
                    "gain_scale": {"type": "number"},
                    "damping_scale": {"type": "number"},
                    "blend": {"type": "number"},
                    "steps": {"type": "integer"},
                },
            },
        }
    return {"title": "tdaot step", "type": "object", "properties": properties}


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _rows(log: FlightLog, key: str, kind: str, tensor: torch.Tensor) -> list[dict[str, Any]]:
    values = tensor.reshape(tensor.shape[0], -1)
    if values.dtype in (torch.float16, torch.bfloat16):
        values = values.float()
    rows = values.tolist()
    groups = term_groups(log, key, kind)
    if groups is not None:
        return [
            {term: {name: _plain(row[i]) for name, i in elements} for term, elements in groups}
            for row in rows
        ]
    names = element_names(log, key, kind)
    return [{name: _plain(v) for name, v in zip(names, row)} for row in rows]


def step_message(log: FlightLog, index: int) -> dict[str, Any]:
    """The ``/step`` message of step ``index``."""
    step = log.steps[index]
    message: dict[str, Any] = {
        "seq": step.seq,
        "start_ns": step.start_ns,
        "duration_ns": step.duration_ns,
        "duration_us": step.duration_ns / 1e3,
        "flags": step.flags,
        "threw": step.threw,
        "nonfinite": step.nonfinite,
        "rate_limited": step.rate_limited,
        "interventions": dict(step.interventions),
        "reset": [bool(r) for r in step.reset.tolist()],
    }
    if log.weights_generation is not None and step.weights_generation is not None:
        message["weights_generation"] = step.weights_generation
        message["weights_changing"] = step.weights_changing
    if step.supervisor is not None:
        message["supervisor"] = [
            {
                "mode": row.mode,
                "gain_scale": _plain(row.gain_scale),
                "damping_scale": _plain(row.damping_scale),
                "blend": _plain(row.blend),
                "steps": row.steps,
            }
            for row in step.supervisor
        ]
    return message


def export_mcap(log: FlightLog, path: str | os.PathLike) -> dict[str, int]:
    """Writes ``log`` to the MCAP file ``path``; returns the messages written per topic.
    :class:`tdaot.MissingDependencyError` (with the pip line) without the ``mcap`` library."""
    require("tdaot log export --mcap", MCAP)
    from mcap.well_known import MessageEncoding, SchemaEncoding
    from mcap.writer import Writer

    channels: dict[str, int] = {}
    counts: dict[str, int] = {}
    with open(os.fspath(path), "wb") as stream:
        writer = Writer(stream)
        writer.start(profile=PROFILE, library="tdaot")
        metadata = {
            "package_path": log.package_path,
            "package_sha256": log.package_sha256,
            "runtime": log.runtime,
            "model": log.model,
            "batch": str(log.batch),
            "envelope": str(log.envelope).lower(),
            "supervised": str(log.supervised).lower(),
            "bound_at_unix_ns": str(log.bound_at_unix_ns),
        }
        writer.add_metadata("tdaot.flight_log", metadata)

        def register(name: str, schema: dict[str, Any], topic_name: str) -> None:
            schema_id = writer.register_schema(
                name=name, encoding=SchemaEncoding.JSONSchema, data=json.dumps(schema).encode()
            )
            channels[topic_name] = writer.register_channel(
                topic=topic_name, message_encoding=MessageEncoding.JSON, schema_id=schema_id
            )
            counts[topic_name] = 0

        keys = [("input", k) for k in log.input_keys] + [("output", k) for k in log.output_keys]
        for kind, key in keys:
            register(f"tdaot.{kind}s.{key}", key_schema(log, key, kind), topic(key, kind))
        register("tdaot.step", step_schema(log), STEP_TOPIC)
        for index, step in enumerate(log.steps):
            messages = [
                (topic(key, kind), {"seq": step.seq, "rows": _rows(log, key, kind, tensors[key])})
                for kind, key in keys
                for tensors in [step.inputs if kind == "input" else step.outputs]
            ]
            messages.append((STEP_TOPIC, step_message(log, index)))
            when = log.wall_ns(step)
            for topic_name, message in messages:
                writer.add_message(
                    channel_id=channels[topic_name],
                    log_time=when,
                    publish_time=when,
                    sequence=step.seq & 0xFFFFFFFF,
                    data=json.dumps(message, allow_nan=False).encode(),
                )
                counts[topic_name] += 1
        writer.finish()
    return counts
