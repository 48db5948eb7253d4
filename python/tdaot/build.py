"""tdaot.build: tensordict policy + example TensorDict -> .pt2 package with a manifest."""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

import tensordict
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from tdaot._version import __version__
from tdaot.compile import check_output_path, compile_package, host_cpu_isa
from tdaot.errors import BuildError
from tdaot.export import BatchSpec, export_policy, module_class_name
from tdaot.manifest import Manifest, Source

DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class Artifact:
    """A built package: where it is, what it holds, and what building it cost."""

    path: str
    manifest: Manifest
    export_seconds: float
    compile_seconds: float

    @property
    def size_bytes(self) -> int:
        return os.path.getsize(self.path)


def build(
    policy: TensorDictModuleBase,
    example: TensorDictBase,
    path: str | os.PathLike,
    *,
    out_keys: Sequence | None = None,
    batch: BatchSpec = "dynamic",
    interaction_type: str = "deterministic",
    device: str = "cpu",
    factory: str | None = None,
) -> Artifact:
    """Export ``policy`` on ``example`` and compile it into a package at ``path``.

    ``example.batch_size[0]`` is the batch dim; ``batch`` is "dynamic" (1 .. 2**20),
    a ``(min, max)`` pair, "static" (the example's batch) or a fixed batch size.
    ``out_keys`` defaults to the policy's out keys. ``factory`` is recorded in the
    manifest as the artifact's source (the CLI passes "file.py:function").
    """
    path = check_output_path(os.fspath(path))
    if device not in DEVICES:
        raise BuildError(f"device {device!r} is not one of {', '.join(DEVICES)}")
    if device == "cuda":
        if not torch.cuda.is_available():
            raise BuildError("device 'cuda' was asked for but torch sees no CUDA device on this host")
        policy, example = _on_device(policy, example, device)

    started = time.perf_counter()
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
        cpu_target="native",
        cpu_isa=host_cpu_isa() if device == "cpu" else "",
        torch_version=torch.__version__,
        tensordict_version=tensordict.__version__,
        tdaot_version=__version__,
        source=Source(module_class=module_class_name(policy), factory=factory),
        recurrent=exported.recurrent,
    )
    compile_package(exported.program, manifest, path)
    return Artifact(
        path=path,
        manifest=manifest,
        export_seconds=exported_at - started,
        compile_seconds=time.perf_counter() - exported_at,
    )


def _on_device(policy, example, device):
    # A copy, so building for CUDA does not move the caller's policy.
    return copy.deepcopy(policy).to(device), example.to(device)
