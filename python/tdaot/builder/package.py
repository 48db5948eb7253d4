"""The package step: where a package may be written, and its seal (the sha256 of every
file recorded in its manifest)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

from tdaot import _torch_compat
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


def seal_package(archive_path: str, manifest: Manifest) -> Manifest:
    """Records the sha256 of every file of a freshly compiled package in its manifest.

    AOTInductor wrote the manifest before the files existed, so the archive is written
    again, in place and in the same record order, with the digests added to the manifest
    in its metadata JSONs (which are therefore not digested themselves; the zip writer's
    bookkeeping records are rewritten by the writer). Returns the sealed manifest.
    """
    records = _torch_compat.read_archive(archive_path)
    files = {
        name: hashlib.sha256(data).hexdigest() for name, data in records.items() if not digest_exempt(name)
    }
    sealed = dataclasses.replace(manifest, files=files).validated()  # as the runtime reads it
    sealed_json = sealed.to_json()
    rewritten = {}
    for name, data in records.items():
        if name in BOOKKEEPING_RECORDS:
            continue
        if digest_exempt(name):
            metadata = json.loads(data)
            if METADATA_KEY in metadata:
                metadata[METADATA_KEY] = sealed_json
            data = json.dumps(metadata).encode()
        rewritten[name] = data
    os.remove(archive_path)  # the top folder is named after the file, so keep its name
    _torch_compat.write_archive(archive_path, rewritten)
    return sealed
