"""tdaot.build: tensordict policy + example TensorDict -> .pt2 package with a manifest."""

from __future__ import annotations

import copy
import hashlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import tensordict
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from tdaot._version import __version__
from tdaot.cache import ArtifactCache, artifact_key
from tdaot.compile import check_output_path, compile_package
from tdaot.errors import BuildError
from tdaot.export import BatchSpec, export_policy, module_class_name
from tdaot.manifest import Manifest, Source
from tdaot.targets import cpu_target as resolve_cpu_target
from tdaot.targets import vector_isa

DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class Artifact:
    """A built package: where it is, what it holds, and what building it cost."""

    path: str
    manifest: Manifest
    export_seconds: float
    compile_seconds: float  # or the cache copy's time on a hit
    cache_hit: bool = False

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
) -> Artifact:
    """Export ``policy`` on ``example`` and compile it into a package at ``path``.

    ``example.batch_size[0]`` is the batch dim; ``batch`` is "dynamic" (1 .. 2**20),
    a ``(min, max)`` pair, "static" (the example's batch) or a fixed batch size.
    ``out_keys`` defaults to the policy's out keys. ``cpu_target`` is "native" (the
    build host) or an x86-64 level ("x86-64-v2", "x86-64-v3", "x86-64-v4"). ``factory``
    is recorded in the manifest as the artifact's source (the CLI passes "file.py:function").
    With a ``cache``, a package built before from the same program and manifest is
    copied instead of compiled. ``on_status`` hears "exporting", then "compiling" or
    "cached".
    """
    report = on_status or (lambda status: None)
    path = check_output_path(os.fspath(path))
    target = resolve_cpu_target(cpu_target)
    if device not in DEVICES:
        raise BuildError(f"device {device!r} is not one of {', '.join(DEVICES)}")
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
    manifest = Manifest(
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
    )
    key = artifact_key(exported.program, manifest) if cache is not None else None
    cache_hit = key is not None and cache.fetch(key, path)
    if cache_hit:
        report("cached")
    else:
        report("compiling")
        compile_package(exported.program, manifest, path)
        if key is not None:
            cache.store(key, path)
    return Artifact(
        path=path,
        manifest=manifest,
        export_seconds=exported_at - started,
        compile_seconds=time.perf_counter() - exported_at,
        cache_hit=cache_hit,
    )


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _on_device(policy, example, device):
    # A copy, so building for CUDA does not move the caller's policy.
    return copy.deepcopy(policy).to(device), example.to(device)
