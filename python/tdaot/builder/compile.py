"""Compile exported programs into the models of a .pt2 package with AOTInductor."""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time

import torch

from tdaot import _torch_compat
from tdaot.builder import compile_log, lite
from tdaot.builder.cache import artifact_key
from tdaot.builder.compiler_cache import compiles_through_ccache
from tdaot.builder.export import tracing_noise_silenced
from tdaot.builder.inductor_configs import inductor_configs
from tdaot.builder.inductor_dir import build_cache_dir
from tdaot.builder.options import BuildOptions
from tdaot.builder.package import check_output_path, write_package
from tdaot.builder.targets import CPU_TARGETS, compiling_for
from tdaot.builder.tuning import (
    ModelPlan,
    compiling_with,
    plan_key_parts,
    plan_models,
    tune_plan,
)
from tdaot.builder.weights_format import program_record
from tdaot.errors import CompileError
from tdaot.manifest import METADATA_KEY, BatchRange, Manifest, ModelSpec

ARCHIVE_NAME = "package"


def compile_model(
    program: torch.export.ExportedProgram,
    manifest: Manifest,
    options: BuildOptions,
    plan: ModelPlan,
    staging: str,
) -> None:
    """Compile ``program`` (as exported) as the model ``plan`` describes into a one-model
    package at ``staging`` (its model named "model"; tdaot.builder.package.write_package
    names it). The plan's rewrites are applied here."""
    target = CPU_TARGETS[manifest.cpu_target]
    # What tdaot.export_weights checks a new policy against, of the program as exported.
    record = program_record(
        program,
        kernel_threads=options.kernel_threads,
        export={"batch": options.batch, "out_keys": options.out_keys},
        plan=plan.describe(),
        # What export_weights must compile the model with again for its constants to fit.
        tuning=plan_key_parts(plan),
    )
    refusal = known_refusal(manifest, plan)
    if refusal is not None:
        raise CompileError(refusal)
    started, ok = time.perf_counter(), False
    try:
        program = tune_plan(program, plan)
        with (
            tracing_noise_silenced(),
            compiling_for(target),
            compiling_with(plan),
            # A path of the model's key: the same bytes from any cache setting (inductor_dir).
            build_cache_dir(_compile_key(program, manifest, options, plan)),
            compiles_through_ccache(),
        ):
            configs = inductor_configs(manifest, options, plan)
            configs["aot_inductor.metadata"] = {METADATA_KEY: manifest.to_json(), **record}
            _torch_compat.aoti_compile_and_package(program, staging, configs)
        ok = True
    except Exception as err:  # noqa: BLE001 - reported with the inductor error's first line
        first = next((ln for ln in str(err).splitlines() if ln.strip()), type(err).__name__)
        where = "" if plan.name == "model" else f" (model {plan.name!r}, batch {plan.batch})"
        raise CompileError(
            f"AOTInductor could not compile {manifest.source.module_class}{where}: {first}"
        ) from err
    finally:
        what = f"{manifest.source.module_class} {plan.name} {plan.tuning}"
        what += (f" b{plan.batch}" if plan.batch else "") + (" bound" if plan.bound else "")
        compile_log.record(what, time.perf_counter() - started, ok)
    if plan.bound and _torch_compat.calls_proxy_executor(_torch_compat.read_archive(staging)):
        raise CompileError(_proxy_executor_refusal(manifest, plan))


def _compile_key(program, manifest: Manifest, options: BuildOptions, plan: ModelPlan) -> str:
    """The model's cache key less the factory's path, which the compiled code does not depend on:
    the build folder is named after it and its name is in the sources, so the same policy built
    from another checkout or folder compiles the same sources (which ccache then serves)."""
    source = dataclasses.replace(manifest.source, factory=None)
    return artifact_key(program, dataclasses.replace(manifest, source=source), options, plan)


def known_refusal(manifest: Manifest, plan: ModelPlan) -> str | None:
    """Why the model ``plan`` would be refused before compiling it, or None: a bound model of a
    policy with custom operators, which AOTInductor calls through its proxy executor."""
    return _proxy_executor_refusal(manifest, plan) if plan.bound and manifest.custom_ops else None


def _proxy_executor_refusal(manifest: Manifest, plan: ModelPlan) -> str:
    # The bound run calls a bare model instance, which has no proxy executor: the operators
    # AOTInductor reaches only through it (random sampling, custom operators) would fail.
    return (
        f"{manifest.source.module_class} (model {plan.name!r}, batch {plan.batch}) calls operators "
        "through AOTInductor's proxy executor (random sampling or custom operators), which the "
        "bound run's plain C entry point cannot reach"
    )


def compile_package(
    program: torch.export.ExportedProgram, manifest: Manifest, path: str, options: BuildOptions
) -> str:
    """A one-model package of ``program`` at ``path`` built with ``options.tuning``
    ("throughput" or "latency"), carrying ``manifest`` sealed with the digests of its files.
    tdaot.build makes its packages of several models with :func:`build_package`."""
    batch, isa = manifest.batch, manifest.cpu_isa
    plan = plan_models(options.tuning, (), manifest.device, batch.min, batch.max, vector_isa=isa)[0]
    manifest = planned_manifest(manifest, [plan])
    folder = os.path.dirname(check_output_path(path))
    with tempfile.TemporaryDirectory(prefix=".tdaot-", dir=folder) as staging:
        unit = unit_path(staging, plan.name)
        compile_model(program, manifest, options, plan, unit)
        build_package({plan.name: (unit, plan)}, manifest, path, options)
    return path


def planned_manifest(manifest: Manifest, plans: list[ModelPlan]) -> Manifest:
    """``manifest`` listing the models ``plans`` make, checked by the runtime's own parser before
    a long compile."""
    planned = dataclasses.replace(manifest, models=model_specs(manifest, plans))
    planned.validated(sealed=False)
    return planned


def unit_path(staging: str, name: str) -> str:
    """Where the one-model package of the model ``name`` is made under ``staging``.

    AOTInductor names the archive's top folder after the file, so every unit is made under one
    fixed name: its bytes then depend on neither the output name nor a random temp name
    (reproducible builds, shareable cache entries)."""
    folder = os.path.join(staging, name)
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, ARCHIVE_NAME + ".pt2")


def build_package(
    units: dict[str, tuple[str, ModelPlan]], manifest: Manifest, path: str, options: BuildOptions
) -> Manifest:
    """The package at ``path`` of the one-model packages ``units`` (model name -> the unit's
    file and the plan it was built as), carrying ``manifest`` with its ``models`` set from them,
    sealed with the digests of its files; returns that manifest.

    Each model records whether it runs on the lite runtime (tdaot.builder.lite); a
    specialised model that does not is a LiteWarning, or with ``options.require_lite`` a
    BuildError.

    The package is written beside its destination and renamed into place, so a failed or
    interrupted build never leaves a half-written artifact.
    """
    path = check_output_path(path)
    built = [plan for _, plan in units.values()]
    manifest = dataclasses.replace(manifest, models=model_specs(manifest, built))
    # Under the fixed archive name too (unit_path says why), beside its destination.
    with tempfile.TemporaryDirectory(prefix=".tdaot-", dir=os.path.dirname(path)) as folder:
        staging = os.path.join(folder, ARCHIVE_NAME + ".pt2")
        files = {name: unit for name, (unit, _) in units.items()}
        sealed = write_package(files, manifest, staging, bound={plan.name: plan.bound for plan in built})
        # Before the package is in place: with require_lite, a package that fails it is not left.
        lite.check(sealed, options.require_lite, stacklevel=4)  # the caller of tdaot.build
        os.replace(staging, path)
    return sealed


def _served(plan: ModelPlan, package: BatchRange) -> BatchRange:
    """The batches ``plan``'s model serves in a package serving ``package``."""
    if plan.batch:
        return BatchRange(plan.batch, plan.batch)
    return BatchRange(package.min, plan.batch_max) if plan.batch_max else package


def model_specs(manifest: Manifest, plans: list[ModelPlan]) -> tuple[ModelSpec, ...]:
    """The manifest's list of models: each plan's name, batches, tuning and chunk rows."""
    return tuple(
        ModelSpec(
            p.name,
            _served(p, manifest.batch),
            p.tuning,
            chunk_rows=p.chunk_rows,
        )
        for p in plans
    )
