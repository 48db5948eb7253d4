"""tdaot.build: tensordict policy + example TensorDict -> .pt2 package with a manifest."""

from __future__ import annotations

import copy
import hashlib
import os
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import tensordict
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from tdaot._version import __version__
from tdaot.cache import ArtifactCache, artifact_key
from tdaot.compile import check_output_path, compile_options, compile_package
from tdaot.errors import BuildError, CompileError
from tdaot.export import (
    BatchSpec,
    ExportedPolicy,
    StaticBatchWarning,
    custom_operators,
    export_policy,
    module_class_name,
)
from tdaot.manifest import Manifest, Source, read_manifest
from tdaot.targets import cpu_target as resolve_cpu_target
from tdaot.targets import vector_isa
from tdaot.tuning import DEFAULT_TUNING, check_tuning, tune_program

DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class Artifact:
    """A built package: where it is, what it holds, and what building it cost."""

    path: str
    manifest: Manifest
    export_seconds: float
    compile_seconds: float  # or the cache copy's time on a hit
    cache_hit: bool = False
    exported_path: str | None = None  # the torch.export program, when saved

    @property
    def size_bytes(self) -> int:
        return os.path.getsize(self.path)

    @property
    def sha256(self) -> str:
        return file_sha256(self.path)


def build(
    policy: TensorDictModuleBase,
    example: TensorDictBase,
    path: str | os.PathLike,
    *,
    out_keys: Sequence | None = None,
    batch: BatchSpec = "dynamic",
    interaction_type: str = "deterministic",
    device: str = "cpu",
    cpu_target: str = "native",
    factory: str | None = None,
    cache: ArtifactCache | None = None,
    on_status: Callable[[str], None] | None = None,
    save_exported: bool = False,
    kernel_threads: int = 1,
    tuning: str = DEFAULT_TUNING,
) -> Artifact:
    """Export ``policy`` on ``example`` and compile it into a package at ``path``.

    ``example.batch_size[0]`` is the batch dim; ``batch`` is "dynamic" (1 .. 2**20),
    a ``(min, max)`` pair, "static" (the example's batch) or a fixed batch size.
    ``out_keys`` defaults to the policy's out keys. ``cpu_target`` is "native" (the
    build host) or an x86-64 level ("x86-64-v2", "x86-64-v3", "x86-64-v4"). ``factory``
    is recorded in the manifest as the artifact's source (the CLI passes "file.py:function").
    With a ``cache``, a package built before from the same program and manifest is
    copied instead of compiled. ``on_status`` hears "exporting", then "compiling" or
    "cached". ``save_exported`` also writes the torch.export program beside the package
    (``NAME.ep.pt2``, see :func:`exported_program_path`), to inspect what went into it.
    ``kernel_threads`` is the OpenMP thread count compiled into the generated kernels:
    1 (serial, best for control loops), N, or 0 to let the runtime decide. ``tuning`` is
    "throughput" (default: ATen's matrix and RNN kernels) or "latency" (inductor's C++
    GEMM template, recurrent layers decomposed: faster at batch 1, slower at large
    batch; CPU only; see tdaot.tuning).
    """
    report = on_status or (lambda status: None)
    path = check_output_path(os.fspath(path))
    target = resolve_cpu_target(cpu_target)
    compile_options(kernel_threads)  # refuse bad values before the export
    if device not in DEVICES:
        raise BuildError(f"device {device!r} is not one of {', '.join(DEVICES)}")
    check_tuning(tuning, device)
    if device == "cuda":
        if not torch.cuda.is_available():
            raise BuildError("device 'cuda' was asked for but torch sees no CUDA device on this host")
        policy, example = _on_device(policy, example, device)

    started = time.perf_counter()
    report("exporting")
    exported = export_policy(
        policy, example, out_keys=out_keys, batch=batch, interaction_type=interaction_type
    )
    exported_at = time.perf_counter()

    def manifest_of(exported: ExportedPolicy) -> Manifest:
        return Manifest(
            inputs=exported.inputs,
            outputs=exported.outputs,
            batch=exported.batch,
            interaction_type=interaction_type,
            device=device,
            cpu_target=target.name,
            cpu_isa=vector_isa(target) if device == "cpu" else "",
            torch_version=torch.__version__,
            tensordict_version=tensordict.__version__,
            tdaot_version=__version__,
            source=Source(module_class=module_class_name(policy), factory=factory),
            recurrent=exported.recurrent,
            custom_ops=custom_operators(exported.program),
        )

    manifest = manifest_of(exported)
    try:
        cache_hit = _compile_or_fetch(exported.program, manifest, path, cache, report, kernel_threads, tuning)
    except CompileError as err:
        if not (batch == "dynamic" and exported.batch.dynamic):
            raise
        # Inductor lowers some programs only with concrete sizes (torch 2.13 fails on
        # the scan higher-order op of torchrl's recurrent "scan" backend when the
        # batch is symbolic). As for a policy that specialises the batch while
        # tracing: fall back to the example's batch, and say so.
        exported = export_policy(
            policy, example, out_keys=out_keys, batch="static", interaction_type=interaction_type
        )
        warnings.warn(
            f"{manifest.source.module_class} could not be compiled with a dynamic batch ({err}); "
            f"building with a static batch of {exported.batch.min} instead. The artifact accepts "
            f"only batch {exported.batch.min}; build with batch='static' (--batch static) to skip "
            "the dynamic attempt.",
            StaticBatchWarning,
            stacklevel=2,
        )
        manifest = manifest_of(exported)
        cache_hit = _compile_or_fetch(exported.program, manifest, path, cache, report, kernel_threads, tuning)
    if save_exported:
        # What went into the compiler: the tuning's rewrite included.
        torch.export.save(tune_program(exported.program, tuning), exported_program_path(path))
    # The package's own manifest: sealed with the digests of the compiled files.
    manifest = read_manifest(path)
    return Artifact(
        path=path,
        manifest=manifest,
        export_seconds=exported_at - started,
        compile_seconds=time.perf_counter() - exported_at,
        cache_hit=cache_hit,
        exported_path=exported_program_path(path) if save_exported else None,
    )


def exported_program_path(package_path: str | os.PathLike) -> str:
    """Where ``save_exported`` puts the torch.export program of a package: NAME.ep.pt2."""
    stem = os.fspath(package_path)
    return (stem[: -len(".pt2")] if stem.endswith(".pt2") else stem) + ".ep.pt2"


def _compile_or_fetch(
    program,
    manifest: Manifest,
    path: str,
    cache: ArtifactCache | None,
    report,
    kernel_threads: int,
    tuning: str,
) -> bool:
    """Compiles ``program`` to ``path``, or copies it from ``cache``; True on a cache hit."""
    key = artifact_key(program, manifest, kernel_threads, tuning) if cache is not None else None
    if key is not None and cache.fetch(key, path):
        report("cached")
        return True
    report("compiling")
    compile_package(program, manifest, path, kernel_threads, tuning)
    if key is not None:
        cache.store(key, path)
    return False


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _on_device(policy, example, device):
    # A copy, so building for CUDA does not move the caller's policy.
    return copy.deepcopy(policy).to(device), example.to(device)
