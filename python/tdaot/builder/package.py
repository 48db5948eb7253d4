"""The package step: where a package may be written, and its seal (the sha256 of every
file recorded in its manifest)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Mapping

from tdaot import _torch_compat
from tdaot.builder import lite, patches
from tdaot.errors import BuildError
from tdaot.manifest import BOOKKEEPING_RECORDS, METADATA_KEY, Manifest, digest_exempt


def check_output_path(path: str) -> str:
    """Fail before a long export when the package could not be written."""
    path = os.path.abspath(path)
    if not path.endswith(".pt2"):
        raise BuildError(f"output path {path!r} must end with .pt2 (AOTInductor's package suffix)")
    if os.path.isdir(path):
        raise BuildError(f"output path {path!r} is a directory")
    parent = os.path.dirname(path)
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as err:
        raise BuildError(f"cannot create the directory of output path {path!r}: {err.strerror}") from None
    if not os.access(parent, os.W_OK):
        raise BuildError(f"output path {path!r} is not writable (no write permission on {parent!r})")
    return path


MODEL_DIR = "data/aotinductor/"


def write_package(
    units: dict[str, str], manifest: Manifest, path: str, bound: Mapping[str, bool] | None = None
) -> Manifest:
    """The package at ``path``: the model of each one-model package ``units[name]`` under
    ``name`` (AOTInductor loads a package's models by name, data/aotinductor/<name>/), and
    ``manifest`` sealed with the sha256 of every file. Returns the sealed manifest.

    With ``bound`` (model name -> built for the bound run), each model of the manifest records
    whether it runs on the lite runtime, read from its library here, where every model's files
    exist whether compiled or copied from the cache (tdaot.builder.lite).

    AOTInductor wrote the manifest into each model's metadata JSONs before the files
    existed; they get the sealed one (and are therefore not digested themselves). Records
    outside the model folders are the writer's bookkeeping, which it writes anew.
    """
    records: dict[str, bytes] = {}
    for name, unit in units.items():
        for record, data in _torch_compat.read_archive(unit).items():
            if record in BOOKKEEPING_RECORDS:
                continue
            if not record.startswith(MODEL_DIR + "model/"):
                raise BuildError(f"a compiled model holds an unexpected record {record!r}")
            renamed = MODEL_DIR + name + "/" + record[len(MODEL_DIR + "model/") :]
            records[renamed] = _reproducible(record, data)
    if bound is not None:
        manifest = dataclasses.replace(
            manifest,
            models=tuple(
                dataclasses.replace(
                    spec, lite=lite.support(_libraries(records, spec.name), spec, bound.get(spec.name, False))
                )
                for spec in manifest.models
            ),
        )
    if manifest.numerics is not None:  # planned as the models may take them: as they do
        manifest = dataclasses.replace(
            manifest, numerics=patches.numerics_in_code(manifest.numerics, records)
        )
    files = {
        name: hashlib.sha256(data).hexdigest() for name, data in records.items() if not digest_exempt(name)
    }
    sealed = dataclasses.replace(manifest, files=files).validated()  # as the runtime reads it
    sealed_json = sealed.to_json()
    for name, data in records.items():
        if digest_exempt(name):
            metadata = json.loads(data)
            if METADATA_KEY in metadata:
                metadata[METADATA_KEY] = sealed_json
            records[name] = json.dumps(metadata).encode()
    _torch_compat.write_archive(path, records)
    return sealed


# Inductor appends "// Compile cmd" and "// Link cmd" comments (the g++ lines, with the cache's
# paths) to a model's packaged .cpp sources each time it compiles them into the same cache
# directory, so a rebuild of the same policy in one process gave other sources, digests and
# package bytes although the libraries were identical. They are dropped: the package is then the
# same bytes whenever the compiled code is.
_BUILD_COMMANDS = re.compile(rb"\n*// Compile cmd\n//[^\n]*\n// Link cmd\n//[^\n]*(?=\n|$)")


def _reproducible(record: str, data: bytes) -> bytes:
    """``data`` of the archive record ``record`` without inductor's build-command comments."""
    return _BUILD_COMMANDS.sub(b"", data) if record.endswith(".cpp") else data


def _libraries(records: dict[str, bytes], model: str) -> list[bytes]:
    """The shared libraries of the model named ``model`` among the package's ``records``."""
    folder = MODEL_DIR + model + "/"
    return [
        data for name, data in sorted(records.items()) if name.startswith(folder) and name.endswith(".so")
    ]
