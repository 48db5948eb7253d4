"""Content-addressed cache of built packages.

The key hashes everything that changes the artifact: the exported program (graph,
signature, range constraints, every parameter, buffer and constant), the manifest
(keys, shapes, batch range, interaction type, device, CPU target and ISA, torch,
tensordict and tdaot versions, source), every BuildOptions field that changes the package,
the inductor options they select and the tuning's graph rewrite.
A hit copies the cached package into place; nothing is compiled.

A specialised model's bound attempt that AOTInductor refused (the array-ref entry point does
not take every graph: random sampling and custom operators need the proxy executor, torch.cond
is not lowered) is remembered under its key too, as a ``.refused`` file holding the refusal, and
for the life of the process whether or not a cache is used: the next build of that model goes
straight to its standard build and warns as the first did. Delete the entry to try again.

The cache lives in ``$TDAOT_CACHE_DIR``, else ``$XDG_CACHE_HOME/tdaot``, else
``~/.cache/tdaot``. A CI system keeps it between runs by caching that directory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

import torch

from tdaot.builder.inductor_configs import inductor_configs
from tdaot.builder.options import BuildOptions
from tdaot.builder.targets import kernel_fixes
from tdaot.builder.tuning import ModelPlan, plan_key_parts, plan_models
from tdaot.cache_folder import copy_atomically, default_cache_dir, write_atomically
from tdaot.manifest import Manifest

# Bump when the build itself changes what a given key produces.
# 3: each model records its tuning for export_weights (tdaot.builder.weights.check_tuning).
CACHE_FORMAT = 3


def artifact_key(
    program: torch.export.ExportedProgram,
    manifest: Manifest,
    options: BuildOptions | None = None,
    plan: ModelPlan | None = None,
    **option_values,
) -> str:
    """The cache key of compiling ``program`` (as exported: the rewrites are named by the
    model's key parts, not hashed from their output) into the model ``plan`` (default: the
    first model ``options`` plan) of a package carrying ``manifest``, with ``options`` (or
    BuildOptions keywords). The key is per model: the package's other models are not in it,
    so a package that gains a specialised model reuses its cached dynamic model."""
    options = (options or BuildOptions()).replace(**option_values)
    if plan is None:
        batch = manifest.batch
        isa = manifest.cpu_isa
        plan = plan_models(
            options.tuning, options.specialize, options.device, batch.min, batch.max, vector_isa=isa
        )[0]
    manifest = dataclasses.replace(manifest, models=())
    digest = hashlib.sha256()

    def add(label: str, data: bytes) -> None:
        # Length-prefixed, so no two different sequences of parts hash alike.
        digest.update(f"{label}:{len(data)}:".encode())
        digest.update(data)

    add("format", str(CACHE_FORMAT).encode())
    add("manifest", manifest.to_json(indent=1).encode())
    add("options", json.dumps(options.artifact_key(), sort_keys=True, default=str).encode())
    add("model", json.dumps(plan.describe(), sort_keys=True).encode())
    add("inductor", json.dumps(inductor_configs(manifest, options, plan), sort_keys=True).encode())
    tuning = plan_key_parts(plan)
    add("tuning", json.dumps(tuning, sort_keys=True).encode())
    fixes = kernel_fixes(program, manifest.cpu_isa)
    if fixes:  # only where they can change the code: other keys stay as they were
        add("kernel fixes", json.dumps(fixes).encode())
    add("graph", str(program.graph).encode())
    add("signature", str(program.graph_signature).encode())
    add("ranges", str(sorted((str(k), str(v)) for k, v in program.range_constraints.items())).encode())
    tensors = {**program.state_dict, **program.constants}
    for name in sorted(tensors):
        value = tensors[name]
        if isinstance(value, torch.Tensor):
            flat = value.detach().to("cpu").contiguous().reshape(-1)
            add(f"tensor {name} {value.dtype} {list(value.shape)}", flat.view(torch.uint8).numpy().tobytes())
        else:  # a torchbind object or other constant: its repr is the best we have
            add(f"constant {name}", repr(value).encode())
    return digest.hexdigest()


# key -> refusal of the bound attempts refused in this process (see the module's docstring).
_refused: dict[str, str] = {}


def remembered_refusal(cache: ArtifactCache | None, key: str) -> str | None:
    """Why the bound attempt of ``key``'s model was refused before, in this process or in
    ``cache``; None when it was not."""
    if key not in _refused and cache is not None:
        refusal = cache.refusal(key)
        if refusal is not None:
            _refused[key] = refusal
    return _refused.get(key)


def remember_refusal(cache: ArtifactCache | None, key: str, refusal: str) -> None:
    _refused[key] = refusal
    if cache is not None:
        cache.store_refusal(key, refusal)


class ArtifactCache:
    def __init__(self, directory: str | os.PathLike | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()

    def _entry(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.pt2"

    def fetch(self, key: str, destination: str) -> bool:
        """Copies the cached package for ``key`` to ``destination``; False on a miss."""
        entry = self._entry(key)
        if not entry.is_file():
            return False
        copy_atomically(entry, Path(destination))
        return True

    def store(self, key: str, package: str) -> None:
        entry = self._entry(key)
        entry.parent.mkdir(parents=True, exist_ok=True)
        copy_atomically(Path(package), entry)

    def refusal(self, key: str) -> str | None:
        try:
            return self._entry(key).with_suffix(".refused").read_text()
        except FileNotFoundError:
            return None

    def store_refusal(self, key: str, refusal: str) -> None:
        entry = self._entry(key).with_suffix(".refused")
        entry.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(entry, refusal.encode(), 0o600)
