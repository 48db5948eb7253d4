"""The manifest a tdaot package carries, and how it is stored.

The manifest is JSON stored as one string under the AOTInductor metadata key
``tdaot.manifest``; AOTInductor writes its metadata beside the compiled library in
the package (``<name>/data/aotinductor/<model>/*_metadata.json``), so both this
module and the C++ runtime read it without loading any compiled code.

Schema (version 2)::

    {"schema_version": 2,
     "inputs":  [{"key": "agents.observation", "dtype": "float32", "shape": [2, 5]}],
     "outputs": [{"key": "sample", "dtype": "float32", "shape": [2]}],
     "batch": {"min": 1, "max": 1048576},
     "interaction_type": "deterministic", "device": "cpu",
     "cpu_target": "native", "cpu_isa": "avx512",
     "torch_version": "2.13.0+cpu", "tensordict_version": "0.14.3", "tdaot_version": "0.1.0",
     "source": {"module_class": "...", "factory": "examples/policies.py:tutorial_policy"},
     "custom_ops": ["tdaot_test::scale_clamp"],
     "files": {"data/aotinductor/model/<hash>.wrapper.so": "<sha256>", ...}}

``shape`` is the per-sample shape: the tensor's shape without the leading batch dim.
Inputs and outputs are listed in the compiled model's positional order. ``custom_ops``
(optional, written only when non-empty) names the operators from outside torch the
compiled model calls, which the runner must find registered before it loads the model.
``files`` (version 2) holds the sha256 of every file in the package by its name inside the
archive (without the archive's top folder), except the metadata JSONs that carry the
manifest itself and the zip writer's bookkeeping records (:func:`digest_exempt`); the
runner checks every digest before it loads the library. Version 1 had no ``files``.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from tdaot.errors import ManifestError, PackageError

METADATA_KEY = "tdaot.manifest"
SCHEMA_VERSION = 2

# Records torch's zip writer adds to every archive after the payload; they cannot be listed
# in the manifest that is itself part of the payload, and the runner never extracts them.
BOOKKEEPING_RECORDS = frozenset(
    {"archive_format", "archive_version", "byteorder", ".data/version", ".data/serialization_id"}
)


def digest_exempt(name: str) -> bool:
    """Whether the archive record ``name`` (without the top folder) is left out of ``files``:
    AOTInductor's metadata JSONs (they carry the manifest) and the writer's bookkeeping."""
    return name in BOOKKEEPING_RECORDS or (
        name.startswith("data/aotinductor/") and name.endswith("_metadata.json")
    )

# Manifest dtype names and the torch dtypes they stand for.
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}
_DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}


def dtype_name(dtype: torch.dtype) -> str:
    """The manifest name of a torch dtype; raises ManifestError for unsupported ones."""
    try:
        return _DTYPE_NAMES[dtype]
    except KeyError:
        raise ManifestError(
            f"dtype {dtype} is not supported by tdaot (supported: {', '.join(DTYPES)})"
        ) from None


def dtype_from_name(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ManifestError(f"unknown dtype {name!r} (known: {', '.join(DTYPES)})") from None


@dataclass(frozen=True)
class TensorSpec:
    """One input or output: manifest key, dtype name and per-sample shape."""

    key: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def torch_dtype(self) -> torch.dtype:
        return dtype_from_name(self.dtype)


@dataclass(frozen=True)
class BatchRange:
    """Inclusive range of batch sizes the artifact accepts; static when min == max."""

    min: int
    max: int

    @property
    def dynamic(self) -> bool:
        return self.min != self.max

    def __contains__(self, batch: int) -> bool:
        return self.min <= batch <= self.max


@dataclass(frozen=True)
class Source:
    module_class: str
    factory: str | None = None


@dataclass(frozen=True)
class StatePair:
    """Recurrent state: output ``output`` of one step is input ``input`` of the next."""

    input: str
    output: str


@dataclass(frozen=True)
class Recurrent:
    """The state a session carries between steps (torchrl's ("next", k) -> k convention).

    ``is_init`` is the manifest key of the bool input that marks the first step after
    a reset (torchrl's "is_init"), or None when the policy has none.
    """

    state: tuple[StatePair, ...]
    is_init: str | None = None


@dataclass(frozen=True)
class Manifest:
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    batch: BatchRange
    interaction_type: str
    device: str
    cpu_target: str
    cpu_isa: str
    torch_version: str
    tensordict_version: str
    tdaot_version: str
    source: Source
    recurrent: Recurrent | None = None
    # Qualified names ("ns::op", "ns::op.overload") of the custom operators the model calls.
    custom_ops: tuple[str, ...] = ()
    # sha256 of every file of the package (see the module docstring); empty until the
    # package is compiled and sealed (tdaot.compile.compile_package).
    files: dict[str, str] = field(default_factory=dict, hash=False)
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def input_keys(self) -> list[str]:
        return [spec.key for spec in self.inputs]

    @property
    def output_keys(self) -> list[str]:
        return [spec.key for spec in self.outputs]

    def describe(self) -> str:
        """The manifest as a human-readable table."""
        batch = f"{self.batch.min}..{self.batch.max}" if self.batch.dynamic else f"{self.batch.min} (static)"
        lines = [
            f"tdaot manifest v{self.schema_version}",
            f"  source            {self.source.module_class}"
            + (f"  ({self.source.factory})" if self.source.factory else ""),
            f"  batch             {batch}",
            f"  interaction type  {self.interaction_type}",
            f"  device            {self.device} (cpu target {self.cpu_target}, isa {self.cpu_isa or '-'})",
            f"  built with        torch {self.torch_version}, tensordict {self.tensordict_version}, "
            f"tdaot {self.tdaot_version}",
        ]
        if self.custom_ops:
            lines.append(f"  custom ops        {', '.join(self.custom_ops)}")
        if self.files:
            lines.append(f"  files             {len(self.files)} with sha256 digests")
        width = max(len(s.key) for s in (*self.inputs, *self.outputs))
        for title, specs in (("inputs", self.inputs), ("outputs", self.outputs)):
            lines.append(f"  {title}")
            for spec in specs:
                shape = ", ".join(["B", *map(str, spec.shape)])
                lines.append(f"    {spec.key.ljust(width)}  {spec.dtype:<8}  [{shape}]")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("extra")
        for section in ("inputs", "outputs"):
            data[section] = [{**spec, "shape": list(spec["shape"])} for spec in data[section]]
        if self.recurrent is None:
            del data["recurrent"]  # optional: only recurrent policies carry it
        else:
            data["recurrent"]["state"] = list(data["recurrent"]["state"])
        if self.custom_ops:
            data["custom_ops"] = list(self.custom_ops)
        else:
            del data["custom_ops"]  # optional: packages calling only torch's operators omit it
        if not self.files:
            del data["files"]  # not sealed yet: the compiled files do not exist
        return {**self.extra, **data}

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=indent is not None)

    @classmethod
    def from_json(cls, text: str, origin: str = "<string>") -> Manifest:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ManifestError(f"manifest of {origin!r} is not valid JSON: {err}", origin) from None
        return cls.from_dict(data, origin)

    @classmethod
    def from_dict(cls, data: Any, origin: str = "<dict>") -> Manifest:
        reader = _FieldReader(origin)
        if not isinstance(data, dict):
            reader.fail("", f"expected a JSON object, got {type(data).__name__}")
        version = reader.get(data, "schema_version", int)
        if version == 1:
            reader.fail(
                "schema_version",
                "version 1 packages carry no file digests, which the runner verifies before "
                "loading; rebuild the package with tdaot >= 0.2",
            )
        if version != SCHEMA_VERSION:
            reader.fail(
                "schema_version",
                f"schema version {version} is not supported (this tdaot reads {SCHEMA_VERSION})",
            )
        batch = reader.get(data, "batch", dict)
        source = reader.get(data, "source", dict)
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        return cls(
            inputs=reader.specs(data, "inputs"),
            outputs=reader.specs(data, "outputs"),
            batch=BatchRange(
                min=reader.get(batch, "min", int, "batch.min"),
                max=reader.get(batch, "max", int, "batch.max"),
            ),
            interaction_type=reader.get(data, "interaction_type", str),
            device=reader.get(data, "device", str),
            cpu_target=reader.get(data, "cpu_target", str),
            cpu_isa=reader.get(data, "cpu_isa", str),
            torch_version=reader.get(data, "torch_version", str),
            tensordict_version=reader.get(data, "tensordict_version", str),
            tdaot_version=reader.get(data, "tdaot_version", str),
            source=Source(
                module_class=reader.get(source, "module_class", str, "source.module_class"),
                factory=reader.get(source, "factory", (str, type(None)), "source.factory"),
            ),
            recurrent=reader.recurrent(data),
            custom_ops=reader.custom_ops(data),
            files=reader.files(data),
            schema_version=version,
            extra={k: v for k, v in data.items() if k not in known},
        )


class _FieldReader:
    """Reads typed manifest fields, naming the package and field on failure."""

    def __init__(self, origin: str) -> None:
        self.origin = origin

    def fail(self, path: str, message: str):
        where = f"field {path!r}: " if path else ""
        raise ManifestError(f"manifest of {self.origin!r}: {where}{message}", self.origin)

    def get(self, data: dict, name: str, kind, path: str | None = None):
        path = path or name
        if name not in data:
            self.fail(path, "missing")
        value = data[name]
        # bool is an int in Python; a manifest never means True by 1.
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
            self.fail(path, f"expected {getattr(kind, '__name__', kind)}, got {value!r}")
        return value

    def recurrent(self, data: dict) -> Recurrent | None:
        if data.get("recurrent") is None:
            return None
        section = self.get(data, "recurrent", dict)
        pairs = []
        for i, entry in enumerate(self.get(section, "state", list, "recurrent.state")):
            path = f"recurrent.state[{i}]"
            if not isinstance(entry, dict):
                self.fail(path, f"expected an object, got {entry!r}")
            pairs.append(
                StatePair(
                    input=self.get(entry, "input", str, f"{path}.input"),
                    output=self.get(entry, "output", str, f"{path}.output"),
                )
            )
        is_init = section.get("is_init")
        if is_init is not None and not isinstance(is_init, str):
            self.fail("recurrent.is_init", f"expected str or null, got {is_init!r}")
        return Recurrent(state=tuple(pairs), is_init=is_init)

    def custom_ops(self, data: dict) -> tuple[str, ...]:
        if data.get("custom_ops") is None:
            return ()
        ops = self.get(data, "custom_ops", list)
        for i, op in enumerate(ops):
            # The runtime looks each one up in the dispatcher by its qualified name.
            if not isinstance(op, str) or not re.fullmatch(r"[^:]+::[^:].*", op):
                self.fail(
                    f"custom_ops[{i}]", f"expected a qualified operator name (namespace::name), got {op!r}"
                )
        return tuple(ops)

    def files(self, data: dict) -> dict[str, str]:
        files = self.get(data, "files", dict)
        if not files:
            self.fail("files", "empty; a package lists the digest of every file")
        for name, digest in files.items():
            if not name or not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
                self.fail(
                    f"files[{name!r}]", f"expected a sha256 digest (64 lowercase hex digits), got {digest!r}"
                )
        return dict(files)

    def specs(self, data: dict, name: str) -> tuple[TensorSpec, ...]:
        specs = []
        for i, entry in enumerate(self.get(data, name, list)):
            path = f"{name}[{i}]"
            if not isinstance(entry, dict):
                self.fail(path, f"expected an object, got {entry!r}")
            dtype = self.get(entry, "dtype", str, f"{path}.dtype")
            if dtype not in DTYPES:
                self.fail(f"{path}.dtype", f"unknown dtype {dtype!r}")
            shape = self.get(entry, "shape", list, f"{path}.shape")
            if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
                self.fail(f"{path}.shape", f"expected non-negative integers, got {shape!r}")
            specs.append(
                TensorSpec(key=self.get(entry, "key", str, f"{path}.key"), dtype=dtype, shape=tuple(shape))
            )
        return tuple(specs)


def read_metadata(path: str | os.PathLike) -> dict[str, str]:
    """All AOTInductor metadata of a package, read from the archive without loading it."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise PackageError(f"package {path!r} does not exist or is not a file", path)
    try:
        with zipfile.ZipFile(path) as archive:
            names = [
                n
                for n in archive.namelist()
                if "/data/aotinductor/" in n and n.endswith("wrapper_metadata.json")
            ]
            if not names:
                raise PackageError(f"{path!r} is a zip archive but not an AOTInductor .pt2 package", path)
            return json.loads(archive.read(names[0]))
    except (zipfile.BadZipFile, OSError) as err:
        raise PackageError(f"{path!r} is not a .pt2 package: {err}", path) from None


def read_manifest(path: str | os.PathLike) -> Manifest:
    """The manifest of a tdaot package, read without loading its compiled library."""
    metadata = read_metadata(path)
    if METADATA_KEY not in metadata:
        raise ManifestError(
            f"package {os.fspath(path)!r} has no {METADATA_KEY!r} metadata: it was not built by tdaot.build",
            os.fspath(path),
        )
    return Manifest.from_json(metadata[METADATA_KEY], os.fspath(path))
