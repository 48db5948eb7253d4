"""Which models a package for another architecture than the build host's holds (``cpu_target``
"aarch64" on x86): the static-batch models the lite runtime runs, and nothing else.

Such a package's models are compiled by a cross compiler against torch's headers only, with no
libtorch of that architecture to link: a model that needs libtorch (the dynamic-batch model, a
specialised batch above BOUND_MAX_BATCH, which is throughput tuned, the ATen-convolution twins)
could not be linked, and would not run on the robot's lite runtime either. Each one left out is
a LiteWarning naming it; a package of which no model would run is refused by name. The
package's batch range becomes the span of the batches its models serve: a batch between them
that none serves is refused by the runtimes by name (the manifest's parser allows such a gap
in an aarch64 package only).
"""

from __future__ import annotations

import dataclasses
import warnings

from tdaot.builder.tuning import BOUND_MAX_BATCH, ModelPlan
from tdaot.errors import BuildError, LiteWarning
from tdaot.manifest import BatchRange, Manifest


def _why_left_out(plan: ModelPlan) -> str | None:
    if plan.batch is None:
        return f"the dynamic-batch model {plan.name!r} needs libtorch"
    if not plan.bound:
        return (
            f"the batch-{plan.batch} model {plan.name!r} is throughput tuned (above "
            f"{BOUND_MAX_BATCH} rows) and needs libtorch"
        )
    return None


def cross_plans(plans: list[ModelPlan], manifest: Manifest, architecture: str) -> list[ModelPlan]:
    """The models of ``plans`` a package for ``architecture`` (not the build host's) holds; a
    LiteWarning for each other one, a BuildError when none is left."""
    what = manifest.source.module_class
    kept = []
    for plan in plans:
        why = _why_left_out(plan)
        if why is None:
            kept.append(plan)
            continue
        warnings.warn(
            f"{what}: {why}, which is not built for {architecture}; the package for "
            f"{architecture} is left without it (the lite runtime runs the static-batch models)",
            LiteWarning,
            stacklevel=5,  # the caller of tdaot.build
        )
    if not kept:
        batches = ", ".join(str(p.batch) for p in plans if p.batch) or "none"
        raise BuildError(
            f"cpu_target {manifest.cpu_target!r}: {what} has no model that runs on {architecture} "
            f"(its lite runtime runs static batches of at most {BOUND_MAX_BATCH} rows; the "
            f"specialised batches are: {batches}); build with specialize=[1] (--specialize 1) or "
            f"batch=1"
        )
    return kept


def cross_manifest(manifest: Manifest, plans: list[ModelPlan]) -> Manifest:
    """``manifest`` serving the span of the batches ``plans`` serve."""
    batches = [p.batch for p in plans]
    return dataclasses.replace(manifest, batch=BatchRange(min(batches), max(batches)))
