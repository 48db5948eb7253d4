"""The weights digest a package records in its manifest (``weights_sha256``): what a freshly
loaded package reports as its live weights, and so the value a service pins.

It is the digest of every tensor a weight file of the unchanged policy holds
(tdaot.builder.weights_format.weights_digest): the program's weights and each compiled model's
constants, read from the model as tdaot.export_weights reads them (a cross-built model's from its
library's bytes, never loaded here). Exporting the unchanged policy therefore gives the same
value. Computed after the models are compiled or copied from the artifact cache; a model whose
constants cannot be read leaves the package without the field, and such a package cannot swap
weights.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from tdaot import _torch_compat
from tdaot.builder.targets import CPU_TARGETS
from tdaot.builder.weights_format import weights_digest
from tdaot.manifest import Manifest


def model_constants(records: dict[str, bytes], manifest: Manifest) -> dict[str, torch.Tensor]:
    """Every constant of the one model in ``records`` (a one-model package) of a package carrying
    ``manifest``, by AOTInductor's internal name, as a weight file holds them: loaded through
    torch's runner, or for a model of another architecture read from its library's bytes as its
    wrapper source lays them out (it cannot be loaded here). RuntimeError when they cannot be read."""
    if CPU_TARGETS[manifest.cpu_target].cross:
        return _torch_compat.compiled_constants_read(records)
    return _torch_compat.compiled_constants(records)


def built_weights_sha256(
    weights: Mapping[str, torch.Tensor], units: Mapping[str, str], manifest: Manifest
) -> tuple[str | None, str]:
    """(the weights digest of the package of ``manifest`` whose policy has ``weights`` (by
    name) and whose models are the one-model packages ``units`` (model name -> file), "")
    or (None, why it cannot be computed on this host)."""
    if manifest.device != "cpu":
        return None, f"it is a {manifest.device} package (weight files are made for cpu packages only)"
    models = {}
    for name, unit in units.items():
        try:
            models[name] = model_constants(_torch_compat.read_archive(unit), manifest)
        except (RuntimeError, OSError) as err:
            first = next((line for line in str(err).splitlines() if line.strip()), type(err).__name__)
            return None, f"its model {name!r} cannot be loaded on this host to read its constants ({first})"
    return weights_digest(weights, models), ""
