"""Compile an exported program into a .pt2 package with AOTInductor."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import warnings

import torch
from torch.export.pt2_archive import PT2ArchiveReader, PT2ArchiveWriter

from tdaot.errors import BuildError, CompileError
from tdaot.manifest import BOOKKEEPING_RECORDS, METADATA_KEY, Manifest, digest_exempt
from tdaot.targets import compiling_for, cpu_target, inductor_options
from tdaot.tuning import DEFAULT_TUNING, compiling_with, tune_program, tuning_options

ARCHIVE_NAME = "package"


def compile_options(kernel_threads: int) -> dict:
    """Inductor options for the OpenMP threads of the generated kernels.

    Left alone, inductor hard-codes `#pragma omp parallel num_threads(N)` with N = the
    build machine's thread count (a 64-core CI runner would bake 64 threads into a
    robot's policy). 1 (tdaot's default, what control loops run) emits serial kernels:
    no OpenMP region at all, ~20 % faster at batch 1 than a 1-thread parallel region.
    N > 1 hard-codes N; 0 leaves the count to the runtime's intra_op_threads.
    """
    if not isinstance(kernel_threads, int) or isinstance(kernel_threads, bool) or kernel_threads < 0:
        raise BuildError(
            f"kernel_threads={kernel_threads!r}: expected 0 (decided at run time) or a count >= 1"
        )
    if kernel_threads == 0:
        return {"cpp.dynamic_threads": True}
    return {"cpp.dynamic_threads": False, "cpp.threads": kernel_threads}


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


def compile_package(
    program: torch.export.ExportedProgram,
    manifest: Manifest,
    path: str,
    kernel_threads: int = 1,
    tuning: str = DEFAULT_TUNING,
) -> str:
    """Compile ``program`` into a package at ``path`` carrying ``manifest``.

    ``tuning`` (see tdaot.tuning) may rewrite the program and adds inductor options.

    The package is written beside its destination and renamed into place, so a
    failed or interrupted build never leaves a half-written artifact.
    """
    path = check_output_path(path)
    target = cpu_target(manifest.cpu_target)
    # AOTInductor names the archive's top folder after the file, so every package is
    # staged under one fixed name: its bytes then depend on neither the output name
    # nor a random temp name (reproducible builds, shareable cache entries).
    staging_dir = tempfile.mkdtemp(prefix=".tdaot-", dir=os.path.dirname(path))
    staging = os.path.join(staging_dir, ARCHIVE_NAME + ".pt2")
    try:
        try:
            program = tune_program(program, tuning)
            with warnings.catch_warnings(), compiling_for(target), compiling_with(tuning):
                # torch 2.13's own packaging code trips its pytree deprecation; not the user's concern.
                warnings.filterwarnings("ignore", message=r"`isinstance\(treespec", category=FutureWarning)
                torch._inductor.aoti_compile_and_package(
                    program,
                    package_path=staging,
                    inductor_configs={
                        "aot_inductor.metadata": {METADATA_KEY: manifest.to_json()},
                        **compile_options(kernel_threads),
                        **tuning_options(tuning),
                        **inductor_options(target),
                    },
                )
        except Exception as err:  # noqa: BLE001 - reported with the inductor error's first line
            first = next((ln for ln in str(err).splitlines() if ln.strip()), type(err).__name__)
            raise CompileError(
                f"AOTInductor could not compile {manifest.source.module_class}: {first}"
            ) from err
        seal_package(staging, manifest)
        os.replace(staging, path)
    finally:
        shutil.rmtree(staging_dir, ignore_errors=True)
    return path


def seal_package(archive_path: str, manifest: Manifest) -> Manifest:
    """Records the sha256 of every file of a freshly compiled package in its manifest.

    AOTInductor wrote the manifest before the files existed, so the archive is written
    again, in place and in the same record order, with the digests added to the manifest
    in its metadata JSONs (which are therefore not digested themselves; the zip writer's
    bookkeeping records are rewritten by the writer). Returns the sealed manifest.
    """
    reader = PT2ArchiveReader(archive_path)
    records = {name: reader.read_bytes(name) for name in reader.get_file_names()}
    del reader
    files = {
        name: hashlib.sha256(data).hexdigest() for name, data in records.items() if not digest_exempt(name)
    }
    sealed = dataclasses.replace(manifest, files=files)
    os.remove(archive_path)  # the top folder is named after the file, so keep its name
    with PT2ArchiveWriter(archive_path) as writer:
        for name, data in records.items():
            if name in BOOKKEEPING_RECORDS:
                continue
            if digest_exempt(name):
                metadata = json.loads(data)
                if METADATA_KEY in metadata:
                    metadata[METADATA_KEY] = sealed.to_json()
                data = json.dumps(metadata).encode()
            writer.write_bytes(name, data)
    return sealed
