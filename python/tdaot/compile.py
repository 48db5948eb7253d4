"""Compile an exported program into a .pt2 package with AOTInductor."""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings

import torch

from tdaot.errors import BuildError, CompileError
from tdaot.manifest import METADATA_KEY, Manifest
from tdaot.targets import compiling_for, cpu_target, inductor_options

ARCHIVE_NAME = "package"
# Inductor otherwise hard-codes `#pragma omp parallel num_threads(N)` with N = the build
# machine's thread count (a 64-core CI runner bakes 64 threads into a robot's policy).
# Dynamic threads leave the count to the runtime: tdaot::Policy's intra_op_threads.
COMPILE_OPTIONS = {"cpp.dynamic_threads": True}


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


def compile_package(program: torch.export.ExportedProgram, manifest: Manifest, path: str) -> str:
    """Compile ``program`` into a package at ``path`` carrying ``manifest``.

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
            with warnings.catch_warnings(), compiling_for(target):
                # torch 2.13's own packaging code trips its pytree deprecation; not the user's concern.
                warnings.filterwarnings("ignore", message=r"`isinstance\(treespec", category=FutureWarning)
                torch._inductor.aoti_compile_and_package(
                    program,
                    package_path=staging,
                    inductor_configs={
                        "aot_inductor.metadata": {METADATA_KEY: manifest.to_json()},
                        **COMPILE_OPTIONS,
                        **inductor_options(target),
                    },
                )
        except Exception as err:  # noqa: BLE001 - reported with the inductor error's first line
            first = next((ln for ln in str(err).splitlines() if ln.strip()), type(err).__name__)
            raise CompileError(
                f"AOTInductor could not compile {manifest.source.module_class}: {first}"
            ) from err
        os.replace(staging, path)
    finally:
        shutil.rmtree(staging_dir, ignore_errors=True)
    return path
