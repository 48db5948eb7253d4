"""A manifest as the human-readable table `tdaot inspect` and `tdaot build` print
(:meth:`tdaot.manifest.Manifest.describe`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tdaot.manifest import Manifest


def describe(manifest: Manifest) -> str:
    """``manifest`` as a table: where it came from, how it was built, its models and its keys."""
    served = manifest.batch
    batch = f"{served.min}..{served.max}" if served.dynamic else f"{served.min} (static)"
    lines = [
        f"tdaot manifest v{manifest.schema_version}",
        f"  source            {manifest.source.module_class}"
        + (f"  ({manifest.source.factory})" if manifest.source.factory else ""),
        f"  batch             {batch}",
        f"  interaction type  {manifest.interaction_type}",
        f"  device            {manifest.device} (cpu target {manifest.cpu_target}, "
        f"isa {manifest.cpu_isa or '-'}"
        + (f", architecture {manifest.architecture})" if manifest.architecture else ")"),
        f"  built with        torch {manifest.torch_version}, tensordict {manifest.tensordict_version}, "
        f"tdaot {manifest.tdaot_version}",
    ]
    if manifest.custom_ops:
        lines.append(f"  custom ops        {', '.join(manifest.custom_ops)}")
    if manifest.files:
        lines.append(f"  files             {len(manifest.files)} with sha256 digests")
        swap = manifest.weights_sha256 or "none recorded (cannot swap weights)"
        lines.append(f"  weights sha256    {swap}")
    if manifest.contract:
        lines += ["  contract", *("  " + line for line in manifest.contract.describe())]
    if manifest.models:
        lines.append("  models")
    for model in manifest.models:
        served = f"{model.batch.min}..{model.batch.max}" if model.batch.dynamic else f"{model.batch.min}"
        lite = ""
        if model.lite is not None:
            lite = ", lite" if model.lite.runs else f", needs libtorch ({model.lite.why})"
        sliced = f"; calls of more than {model.chunk_rows} rows run in slices" if model.chunk_rows else ""
        count = len(model.packed_weights) + len(model.packed_convolutions)
        packed = f"; {count} weight(s) packed for oneDNN at load" if count else ""
        lines.append(f"    {model.name:<15} batch {served}, {model.tuning}{lite}{sliced}{packed}")
    if any(model.lite is not None for model in manifest.models):
        lines.append(f"  lite runtime      {manifest.lite_batches_described()}")
    if manifest.patches is not None:
        lines.append(f"  torch patches     {', '.join(manifest.patches) or 'none'}")
    if manifest.numerics is not None:
        numerics = ", ".join(manifest.numerics) or "none: torch's own results (as inductor computes them)"
        lines.append(f"  numerics          {numerics}")
    width = max(len(s.key) for s in (*manifest.inputs, *manifest.outputs))
    for title, specs in (("inputs", manifest.inputs), ("outputs", manifest.outputs)):
        lines.append(f"  {title}")
        for spec in specs:
            shape = ", ".join(["B", *map(str, spec.shape)])
            lines.append(f"    {spec.key.ljust(width)}  {spec.dtype:<8}  [{shape}]")
    return "\n".join(lines)
