"""The tdaot weight file: safetensors with tdaot's entries and metadata (the C++ reader of both
runtimes is cpp/src/core/weights/weights_file.cpp; both follow this description).

Entries: ``weights/<name>`` (the policy's parameters and buffers by torch.export's names) and
``model/<model>/<constant>`` (every constant one model of the base package takes, by
AOTInductor's internal name, packed ones included). Metadata: ``tdaot.format``,
``tdaot.base_sha256`` (the package file it was made for), ``tdaot.base_manifest_sha256`` (that
package's manifest bytes: what a swap matches, since signing a package changes its file but not
its manifest), ``tdaot.weights_sha256`` (:func:`canonical_digest` of every entry, by its full
name: the ``weights/`` entries and every model's constants, so the digest a policy reports once
the file is live covers every byte its models run) and, reserved for signatures,
``tdaot.signatures``, which nothing digested or signed includes (:func:`signing_payload`).
Format 1 digested the ``weights/`` entries alone; its files are refused by their format name.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping

import safetensors.torch
import torch
from safetensors import safe_open

from tdaot.errors import WeightsError

FORMAT = "tdaot-weights/2"
# Files of format 1: their weights digest left the models' constants out.
FORMAT_1 = "tdaot-weights/1"
SIGNATURES_KEY = "tdaot.signatures"
# The key of each compiled model's AOTInductor metadata holding what export_weights checks a
# new policy against (program_record).
RECORD_KEY = "tdaot.weights"

_DTYPE_CODES = {
    torch.float32: "F32",
    torch.float64: "F64",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}


def canonical_digest(tensors: Mapping[str, torch.Tensor]) -> str:
    """sha256 over the tensors in (bytewise) name order: for each,
    ``"<name>\\n<dtype>\\n<d0,d1,...>\\n<nbytes>\\n"`` then its bytes."""
    digest = hashlib.sha256()
    for name in sorted(tensors, key=lambda n: n.encode()):
        value = tensors[name].detach().to("cpu").contiguous()
        if value.dtype not in _DTYPE_CODES:
            raise WeightsError(
                f"tensor {name!r} has dtype {value.dtype}, which a weight file cannot hold", "", name
            )
        data = value.reshape(-1).view(torch.uint8).numpy().tobytes() if value.numel() else b""
        shape = ",".join(str(size) for size in value.shape)
        digest.update(f"{name}\n{_DTYPE_CODES[value.dtype]}\n{shape}\n{len(data)}\n".encode())
        digest.update(data)
    return digest.hexdigest()


def program_weights(program: torch.export.ExportedProgram) -> dict[str, torch.Tensor]:
    """The parameters, buffers and tensor constants of an exported program, by name."""
    tensors = {**program.state_dict, **program.constants}
    return {name: value for name, value in tensors.items() if isinstance(value, torch.Tensor)}


def graph_digest(program: torch.export.ExportedProgram) -> str:
    """sha256 of an exported program's graph and signature (no weight values)."""
    return hashlib.sha256(f"{program.graph}\n{program.graph_signature}".encode()).hexdigest()


def program_record(program: torch.export.ExportedProgram, **build: object) -> dict[str, str]:
    """The metadata a compiled model carries for weight swaps: its graph digest, tensor table
    (name -> [dtype, shape]) and ``build`` values as JSON."""
    weights = program_weights(program)
    record = {
        "graph": graph_digest(program),
        "tensors": {name: [str(value.dtype), list(value.shape)] for name, value in weights.items()},
        **build,
    }
    return {RECORD_KEY: json.dumps(record, sort_keys=True)}


def file_tensors(
    weights: Mapping[str, torch.Tensor], models: Mapping[str, Mapping[str, torch.Tensor]]
) -> dict[str, torch.Tensor]:
    """Every tensor of a weight file by its entry name: ``weights/<name>`` for each of
    ``weights`` and ``model/<model>/<constant>`` for each model's constants."""
    tensors = {f"weights/{name}": value for name, value in weights.items()}
    for model, constants in models.items():
        tensors.update({f"model/{model}/{name}": value for name, value in constants.items()})
    return tensors


def weights_digest(
    weights: Mapping[str, torch.Tensor], models: Mapping[str, Mapping[str, torch.Tensor]]
) -> str:
    """The weights digest of a weight file of ``weights`` and ``models`` (as
    :func:`write_weight_file` takes them): :func:`canonical_digest` of every tensor it holds.
    What a policy reports as ``weights_sha256`` while those weights are live."""
    return canonical_digest(file_tensors(weights, models))


def write_weight_file(
    path: str | os.PathLike,
    weights: Mapping[str, torch.Tensor],
    models: Mapping[str, Mapping[str, torch.Tensor]],
    base_sha256: str,
    base_manifest_sha256: str,
) -> str:
    """Writes a weight file of ``weights`` (by name) and each model's constants (by internal
    name) made for the package of sha256 ``base_sha256`` whose manifest bytes have sha256
    ``base_manifest_sha256`` (tdaot.builder.weights.package_identity); returns the weights'
    digest (:func:`weights_digest`: of every tensor the file holds). Checks nothing about the
    values (tdaot.export_weights does)."""
    tensors = file_tensors(weights, models)
    tensors = {name: value.detach().to("cpu").contiguous() for name, value in tensors.items()}
    weights_sha256 = canonical_digest(tensors)
    metadata = {
        "tdaot.format": FORMAT,
        "tdaot.base_sha256": base_sha256,
        "tdaot.base_manifest_sha256": base_manifest_sha256,
        "tdaot.weights_sha256": weights_sha256,
    }
    safetensors.torch.save_file(tensors, os.fspath(path), metadata=metadata)
    return weights_sha256


def read_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The ``__metadata__`` of a weight file; WeightsError for a file that is not one."""
    try:
        with safe_open(os.fspath(path), framework="pt") as file:
            metadata = file.metadata() or {}
    except Exception as err:  # noqa: BLE001 - safetensors raises several unrelated types
        raise WeightsError(f"weight file {os.fspath(path)!r} cannot be read: {err}", os.fspath(path)) from err
    if metadata.get("tdaot.format") == FORMAT_1:
        raise WeightsError(
            f"weight file {os.fspath(path)!r} is a {FORMAT_1} file, whose weights digest leaves its "
            f"models' constants out; this tdaot reads {FORMAT} (export it again with tdaot.export_weights)",
            os.fspath(path),
        )
    if metadata.get("tdaot.format") != FORMAT:
        raise WeightsError(
            f"weight file {os.fspath(path)!r} is not a {FORMAT} file (make it with tdaot.export_weights)",
            os.fspath(path),
        )
    return metadata


def signing_payload(path: str | os.PathLike) -> bytes:
    """The exact bytes a signature over the weight file at ``path`` covers: everything but its
    ``tdaot.signatures`` entry, through the digests its header records (the runtime checks
    those against the tensors before it trusts them). Same bytes as C++
    ``tdaot::weights_signing_payload``."""
    metadata = read_metadata(path)
    tensors = safetensors.torch.load_file(os.fspath(path))
    if canonical_digest(tensors) != metadata.get("tdaot.weights_sha256"):
        raise WeightsError(f"weight file {os.fspath(path)!r} does not match its digest", os.fspath(path))
    return (
        f"{FORMAT}\nbase_sha256 {metadata['tdaot.base_sha256']}\n"
        f"base_manifest_sha256 {metadata['tdaot.base_manifest_sha256']}\n"
        f"weights_sha256 {metadata['tdaot.weights_sha256']}\n"
    ).encode()


def _read_header(data: bytes, path: str) -> tuple[dict, int]:
    """(the JSON header, where the tensor bytes start) of a safetensors file's bytes."""
    size = int.from_bytes(data[:8], "little")
    try:
        header = json.loads(data[8 : 8 + size])
    except ValueError:
        header = None
    if (
        len(data) < 8 + size
        or not isinstance(header, dict)
        or not isinstance(header.get("__metadata__", {}), dict)
    ):
        raise WeightsError(f"weight file {path!r} has no readable safetensors header", path)
    return header, 8 + size


def read_signatures(path: str | os.PathLike) -> str | None:
    """The raw ``tdaot.signatures`` entry of a weight file (a JSON list), None when unsigned."""
    return read_metadata(path).get(SIGNATURES_KEY)


def write_signatures(source: str | os.PathLike, target: str | os.PathLike, signatures: list[dict]) -> None:
    """Writes ``source`` to ``target`` with ``signatures`` as its ``tdaot.signatures`` entry:
    only that header entry changes (the header is re-encoded and padded to 8 bytes as
    safetensors writes it); every tensor byte, and so the signed payload, stays the same."""
    data = open(source, "rb").read()
    header, start = _read_header(data, os.fspath(source))
    header["__metadata__"] = {**header.get("__metadata__", {}), SIGNATURES_KEY: json.dumps(signatures)}
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(target, "wb") as file:
        file.write(len(encoded).to_bytes(8, "little") + encoded + data[start:])
