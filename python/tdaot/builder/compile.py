"""Compile an exported program into a .pt2 package with AOTInductor."""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings

import torch

from tdaot import _torch_compat
from tdaot.builder.options import BuildOptions
from tdaot.builder.package import check_output_path, seal_package
from tdaot.builder.targets import CPU_TARGETS, compiling_for, inductor_options
from tdaot.builder.tuning import compiling_with, tune_program, tuning_options
from tdaot.errors import CompileError
from tdaot.manifest import METADATA_KEY, Manifest

ARCHIVE_NAME = "package"


def compile_options(kernel_threads: int) -> dict:
    """Inductor options for the OpenMP threads of the generated kernels.

    Left alone, inductor hard-codes `#pragma omp parallel num_threads(N)` with N = the
    build machine's thread count (a 64-core CI runner would bake 64 threads into a
    robot's policy). 1 (tdaot's default, what control loops run) emits serial kernels:
    no OpenMP region at all, ~20 % faster at batch 1 than a 1-thread parallel region.
    N > 1 hard-codes N; 0 leaves the count to the runtime's intra_op_threads.
    """
    if kernel_threads == 0:
        return {"cpp.dynamic_threads": True}
    return {"cpp.dynamic_threads": False, "cpp.threads": kernel_threads}


def inductor_configs(manifest: Manifest, options: BuildOptions) -> dict:
    """Every inductor option of a build but the manifest: threads, tuning and CPU target."""
    return {
        **compile_options(options.kernel_threads),
        **tuning_options(options.tuning),
        **inductor_options(CPU_TARGETS[manifest.cpu_target]),
    }


def compile_package(
    program: torch.export.ExportedProgram, manifest: Manifest, path: str, options: BuildOptions
) -> str:
    """Compile ``program`` into a package at ``path`` carrying ``manifest``, sealed with the
    digests of its files.

    ``options.tuning`` (see tdaot.builder.tuning) may rewrite the program and adds inductor
    options. The package is written beside its destination and renamed into place, so a
    failed or interrupted build never leaves a half-written artifact.
    """
    path = check_output_path(path)
    manifest.validated(sealed=False)  # by the runtime's own parser, before a long compile
    target = CPU_TARGETS[manifest.cpu_target]
    # AOTInductor names the archive's top folder after the file, so every package is
    # staged under one fixed name: its bytes then depend on neither the output name
    # nor a random temp name (reproducible builds, shareable cache entries).
    staging_dir = tempfile.mkdtemp(prefix=".tdaot-", dir=os.path.dirname(path))
    staging = os.path.join(staging_dir, ARCHIVE_NAME + ".pt2")
    try:
        try:
            program = tune_program(program, options.tuning)
            with warnings.catch_warnings(), compiling_for(target), compiling_with(options.tuning):
                # torch 2.13's own packaging code trips its pytree deprecation; not the user's concern.
                warnings.filterwarnings("ignore", message=r"`isinstance\(treespec", category=FutureWarning)
                configs = inductor_configs(manifest, options)
                configs["aot_inductor.metadata"] = {METADATA_KEY: manifest.to_json()}
                _torch_compat.aoti_compile_and_package(program, staging, configs)
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
