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
     "cpu_target": "native", "cpu_isa": "avx512", "architecture": "x86_64",
     "torch_version": "2.13.0+cpu", "tensordict_version": "0.14.3", "tdaot_version": "0.1.0",
     "source": {"module_class": "...", "factory": "examples/policies.py:tutorial_policy"},
     "custom_ops": ["tdaot_test::scale_clamp"],
     "files": {"data/aotinductor/model/<hash>.wrapper.so": "<sha256>", ...}}

``shape`` is the per-sample shape: the tensor's shape without the leading batch dim.
Inputs and outputs are listed in the compiled model's positional order. ``custom_ops``
(optional, written only when non-empty) names the operators from outside torch the
compiled model calls, which the runner must find registered before it loads the model.
``architecture`` (optional; absent in packages from before it was recorded) is the one the
models run on ("x86_64", "aarch64"); the runtimes refuse a package of another before loading any
of its code. An aarch64 package's models may leave batches of its range unserved (they are its
static-batch lite models only: tdaot.builder.cross_models).
``contract`` (optional) is the robot deployment contract (:mod:`tdaot.contract`).
``patches`` and ``numerics`` (optional: absent in packages built before tdaot recorded them) are
arrays of distinct names: tdaot's patches of torch's internals in force while the models compiled,
and the changes to results beyond torch's own the models take (tdaot.builder.patches has both
tables; empty under ``exact_math``).
``weights_sha256`` (optional) is the digest of every tensor a weight file of the package's
unchanged policy holds (tdaot.builder.weights_digest): what a freshly loaded package reports
as its live weights; absent where the build could not load a model to compute it (such a
package cannot swap weights).
``files`` (version 2) holds the sha256 of every file in the package by its name inside the
archive (without the archive's top folder), except the metadata JSONs that carry the
manifest itself and the zip writer's bookkeeping records (:func:`digest_exempt`); the
runner checks every digest before it loads the library. Version 1 had no ``files``.

The C++ parser (``cpp/src/manifest.cpp``, bound as ``tdaot._C``) is the one definition of a
valid manifest: :meth:`Manifest.from_json` and :func:`read_manifest` read every manifest
through it and build these dataclasses from the normalised JSON it returns, and the build
checks every manifest it writes with :meth:`Manifest.validated`. The conformance corpus both
stages run is ``tests/manifests``.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from tdaot import _C
from tdaot.contract import Contract
from tdaot.errors import BuildError, ManifestError

METADATA_KEY: str = _C.MANIFEST_METADATA_KEY
SCHEMA_VERSION: int = _C.MANIFEST_SCHEMA_VERSION

# Records torch's zip writer adds to every archive after the payload; they cannot be listed
# in the manifest that is itself part of the payload, and the runner never extracts them.
BOOKKEEPING_RECORDS: frozenset[str] = frozenset(_C.BOOKKEEPING_RECORDS)


def digest_exempt(name: str) -> bool:
    """Whether the archive record ``name`` (without the top folder) is left out of ``files``:
    AOTInductor's metadata JSONs (they carry the manifest) and the writer's bookkeeping."""
    return _C.digest_exempt(name)


# Manifest dtype names and the torch dtypes they stand for (the names are the C++ parser's,
# in its order: tests/python/test_manifest_corpus.py checks they agree).
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
    """The manifest name of a torch dtype; raises BuildError for one a package cannot carry
    (this is asked while building, of the policy's tensors)."""
    try:
        return _DTYPE_NAMES[dtype]
    except KeyError:
        raise BuildError(
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
class LiteSupport:
    """Whether a model runs on the lite runtime (``tdaot::lite``, no libtorch), as the build
    found it in the model library's dynamic symbol table (tdaot.builder.lite).

    ``needs``: every symbol the library needs beyond the C and C++ runtime, sorted. When it
    does not run: ``missing``, the first of them the lite runtime lacks (may be empty), and
    ``why``, one line. The C++ parser refuses a model that runs but lacks something, and one
    that does not run without a reason.
    """

    runs: bool
    needs: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        """As the C++ writer writes it: ``missing`` and ``why`` only when it does not run."""
        data: dict[str, Any] = {"runs": self.runs, "needs": list(self.needs)}
        if not self.runs:
            data.update(missing=list(self.missing), why=self.why)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LiteSupport:
        return cls(
            runs=data["runs"],
            needs=tuple(data["needs"]),
            missing=tuple(data.get("missing") or ()),
            why=data.get("why") or "",
        )


@dataclass(frozen=True)
class PackedConvolution:
    """A convolution weight the full runtime gives oneDNN packed (ModelSpec.packed_convolutions):
    the constant's original name and its layer's geometry, which decides oneDNN's layout."""

    weight: str
    padding: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    groups: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "weight": self.weight,
            "padding": list(self.padding),
            "stride": list(self.stride),
            "dilation": list(self.dilation),
            "groups": self.groups,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PackedConvolution:
        geometry = (tuple(data[name]) for name in ("padding", "stride", "dilation"))
        return cls(data["weight"], *geometry, data["groups"])


@dataclass(frozen=True)
class ModelSpec:
    """One compiled model of the package: its name in the archive, the batch sizes it serves,
    its tuning, and whether it runs on the lite runtime (None: not recorded, as in packages
    built before tdaot recorded it; such a model is taken as needing libtorch). The runner
    sends a call with batch B to the model with the narrowest range holding B. ``chunk_rows``
    (None: never) is the most rows the runner hands the model at once: a larger call runs as
    slices of rows (tdaot.builder.tuning says when the build records it). ``packed_weights``:
    the original names of the constants its linear layers hand to oneDNN's matmul, which the
    full runtime gives oneDNN in its packed layout, at load and at every weight swap
    (tdaot.builder.rewrites.wide_product_weights says which); ``packed_convolutions``: the same
    for its convolutions' weights, each with its layer's geometry
    (tdaot.builder.rewrites.onednn_convolution_weights)."""

    name: str
    batch: BatchRange
    tuning: str
    lite: LiteSupport | None = None
    chunk_rows: int | None = None
    packed_weights: tuple[str, ...] = ()
    packed_convolutions: tuple[PackedConvolution, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name,
            "batch": {"min": self.batch.min, "max": self.batch.max},
            "tuning": self.tuning,
        }
        if self.lite is not None:
            data["lite"] = self.lite.to_dict()
        if self.chunk_rows is not None:
            data["chunk_rows"] = self.chunk_rows
        if self.packed_weights:
            data["packed_weights"] = list(self.packed_weights)
        if self.packed_convolutions:
            data["packed_convolutions"] = [conv.to_dict() for conv in self.packed_convolutions]
        return data


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
    # The robot deployment contract (tdaot.contract), when the package was built with one.
    contract: Contract | None = None
    # sha256 of every file of the package (see the module docstring); empty until the
    # package is compiled and sealed (tdaot.builder.package.write_package).
    files: dict[str, str] = field(default_factory=dict, hash=False)
    # The models the package holds (absent in older packages: one model, "model").
    models: tuple[ModelSpec, ...] = ()
    # tdaot's patches of torch's internals in force while the models compiled, and the changes to
    # results beyond torch's own the models take (tdaot.builder.patches); None: not recorded (a
    # package built before tdaot recorded them).
    patches: tuple[str, ...] | None = None
    numerics: tuple[str, ...] | None = None
    # The digest of the weights the package was built with (tdaot.builder.weights_digest);
    # None until the package is built, or where the build could not compute it.
    weights_sha256: str | None = None
    # The architecture the models run on ("x86_64", "aarch64"); "" in packages from before it
    # was recorded (x86_64 builds). Both runtimes refuse another architecture's package by name.
    architecture: str = ""
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def input_keys(self) -> list[str]:
        return [spec.key for spec in self.inputs]

    @property
    def output_keys(self) -> list[str]:
        return [spec.key for spec in self.outputs]

    def describe(self) -> str:
        """The manifest as a human-readable table (tdaot.manifest_text)."""
        from tdaot.manifest_text import describe

        return describe(self)

    def lite_batches(self) -> dict[str, BatchRange]:
        """The models the lite runtime can run (by name) and the batches each serves."""
        return {m.name: m.batch for m in self.models if m.lite is not None and m.lite.runs}

    def lite_batches_described(self) -> str:
        """One line: the batch sizes the lite runtime serves, or that it serves none."""
        served = self.lite_batches()
        if not served:
            return "serves no batch (every model needs libtorch)"
        parts = [f"{b.min}..{b.max}" if b.dynamic else f"{b.min}" for b in served.values()]
        parts = [f"{part} (model {name})" for part, name in zip(parts, served)]
        return "serves batch " + ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("extra")
        if self.contract:
            data["contract"] = self.contract.to_dict()
        else:
            del data["contract"]  # optional: only packages built with a contract carry it
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
        if not self.architecture:
            del data["architecture"]  # a package from before it was recorded
        if self.models:
            data["models"] = [model.to_dict() for model in self.models]
        else:
            del data["models"]  # a package of one model named "model"
        for recorded in ("patches", "numerics"):
            if data[recorded] is None:
                del data[recorded]  # not recorded
            else:
                data[recorded] = list(data[recorded])
        if self.weights_sha256 is None:
            del data["weights_sha256"]  # not built yet, or not computable where it was built
        return {**self.extra, **data}

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=indent is not None)

    @classmethod
    def from_json(cls, text: str, origin: str = "<string>", *, sealed: bool = True) -> Manifest:
        """Parses and validates manifest JSON with the C++ parser (``sealed=False``: a manifest
        before its package's file digests exist); raises ManifestError naming ``origin`` and
        the field at fault."""
        return cls._from_normalised(_C.parse_manifest_json(text, origin, sealed=sealed))

    @classmethod
    def from_dict(cls, data: Any, origin: str = "<dict>", *, sealed: bool = True) -> Manifest:
        """:meth:`from_json` of ``data`` (a dict as :meth:`to_dict` returns it)."""
        try:
            text = json.dumps(data)
        except (TypeError, ValueError) as err:
            raise ManifestError(f"manifest of {origin!r}: not JSON data: {err}", origin) from None
        return cls.from_json(text, origin, sealed=sealed)

    def validated(self, *, sealed: bool = True, origin: str | None = None) -> Manifest:
        """This manifest as the C++ runtime will read it, checked by its parser; raises
        ManifestError naming the field at fault. The build calls it on every manifest it
        writes into a package (``sealed=False`` before the file digests exist)."""
        return Manifest.from_json(self.to_json(), origin or self.source.module_class, sealed=sealed)

    @classmethod
    def _from_normalised(cls, text: str) -> Manifest:
        """The dataclasses of JSON the C++ parser has validated and normalised (every known
        field present, optional ones absent or null); nothing is checked again here."""
        data = json.loads(text)
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        recurrent = data.get("recurrent")
        return cls(
            inputs=_specs(data["inputs"]),
            outputs=_specs(data["outputs"]),
            batch=BatchRange(min=data["batch"]["min"], max=data["batch"]["max"]),
            interaction_type=data["interaction_type"],
            device=data["device"],
            cpu_target=data["cpu_target"],
            cpu_isa=data["cpu_isa"],
            architecture=data.get("architecture", ""),
            torch_version=data["torch_version"],
            tensordict_version=data["tensordict_version"],
            tdaot_version=data["tdaot_version"],
            source=Source(module_class=data["source"]["module_class"], factory=data["source"]["factory"]),
            recurrent=None
            if recurrent is None
            else Recurrent(
                state=tuple(StatePair(input=p["input"], output=p["output"]) for p in recurrent["state"]),
                is_init=recurrent["is_init"],
            ),
            custom_ops=tuple(data.get("custom_ops", ())),
            contract=Contract.from_dict(data["contract"]) if data.get("contract") else None,
            files=dict(data.get("files", {})),
            models=tuple(
                ModelSpec(
                    m["name"],
                    BatchRange(m["batch"]["min"], m["batch"]["max"]),
                    m["tuning"],
                    LiteSupport.from_dict(m["lite"]) if m.get("lite") is not None else None,
                    m.get("chunk_rows"),
                    tuple(m.get("packed_weights", ())),
                    tuple(PackedConvolution.from_dict(c) for c in m.get("packed_convolutions", ())),
                )
                for m in data.get("models") or ()
            ),
            patches=None if data.get("patches") is None else tuple(data["patches"]),
            numerics=None if data.get("numerics") is None else tuple(data["numerics"]),
            weights_sha256=data.get("weights_sha256"),
            schema_version=data["schema_version"],
            extra={k: v for k, v in data.items() if k not in known},
        )


def _specs(entries: list[dict[str, Any]]) -> tuple[TensorSpec, ...]:
    return tuple(TensorSpec(key=e["key"], dtype=e["dtype"], shape=tuple(e["shape"])) for e in entries)


def read_manifest(path: str | os.PathLike) -> Manifest:
    """The manifest of a tdaot package, read without loading its compiled library.

    The C++ runtime reads it (``tdaot._C.read_manifest_json``): the archive checked as the
    runner checks it before loading, the model's own metadata, the manifest validated. Raises
    PackageError for a file that is not a readable package, ManifestError for one without a
    valid manifest.
    """
    return Manifest._from_normalised(_C.read_manifest_json(os.fspath(path)))
