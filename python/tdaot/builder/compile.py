"""Compile exported programs into the models of a .pt2 package with AOTInductor."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
import time
import warnings
from collections.abc import Mapping

import torch

from tdaot import _torch_compat
from tdaot.builder import compile_log, lite, patches
from tdaot.builder.cache import artifact_key
from tdaot.builder.compiler_cache import compiles_through_ccache
from tdaot.builder.export import tracing_noise_silenced
from tdaot.builder.inductor_configs import inductor_configs
from tdaot.builder.inductor_dir import build_cache_dir
from tdaot.builder.options import BuildOptions
from tdaot.builder.package import check_output_path, write_package
from tdaot.builder.targets import CPU_TARGETS, compiles_for, compiling_for
from tdaot.builder.tuning import (
    ModelPlan,
    compiling_with,
    plan_key_parts,
    plan_models,
    rewrites_made,
    tune_plan,
)
from tdaot.builder.weights_digest import built_weights_sha256
from tdaot.builder.weights_format import program_record, program_weights
from tdaot.errors import CompileError, WeightSwapWarning
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
    applied = patches.in_force(plan, manifest)  # those torch does not take: warned by the build
    try:
        program = tune_plan(program, plan)
        with (
            tracing_noise_silenced(),
            compiling_for(target, applied),
            compiling_with(plan, applied),
            # A path of the model's key: the same bytes from any cache setting (inductor_dir).
            build_cache_dir(
                _compile_key(program, manifest, options, plan),
                move_torch="torch_at" in applied,
                move_cache="inductor_cache_at" in applied,
            ),
            compiles_through_ccache() if "compile_commands_run_by" in applied else contextlib.nullcontext(),
            # Inside ccache's routing: ccache runs the command as the toolchain needs it.
            compiles_for(target) if "compiles_with_include_first" in applied else contextlib.nullcontext(),
        ):
            configs = inductor_configs(manifest, options, plan)
            configs["aot_inductor.metadata"] = {METADATA_KEY: manifest.to_json(), **record}
            _torch_compat.aoti_compile_and_package(program, staging, configs, "wrapper_chosen" in applied)
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
    # Nor tdaot's source: inductor embeds the folder in the kernel sources and their file names, so
    # an edit of tdaot that changes no generated code leaves the package's bytes as they were.
    return artifact_key(program, dataclasses.replace(manifest, source=source), options, plan, with_code=False)


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
    plan = plan_models(
        options.tuning,
        (),
        manifest.device,
        batch.min,
        batch.max,
        vector_isa=isa,
        exact_math=options.exact_math,
    )[0]
    manifest = planned_manifest(manifest, [plan], program)
    patches.warn_lacking(patches.concerned(plan, manifest))
    folder = os.path.dirname(check_output_path(path))
    with tempfile.TemporaryDirectory(prefix=".tdaot-", dir=folder) as staging:
        unit = unit_path(staging, plan.name)
        compile_model(program, manifest, options, plan, unit)
        build_package({plan.name: (unit, plan)}, manifest, path, options, program_weights(program))
    return path


def planned_manifest(
    manifest: Manifest, plans: list[ModelPlan], program: torch.export.ExportedProgram
) -> Manifest:
    """``manifest`` listing the models ``plans`` make of ``program`` (as exported), the patches in
    force for them and their changes to results (tdaot.builder.patches), checked by the runtime's
    own parser before a long compile."""
    applied = patches.in_force_for(plans, manifest)
    rewritten = [name for plan in plans for name in rewrites_made(program, plan)]
    planned = dataclasses.replace(
        manifest,
        models=model_specs(manifest, plans),
        patches=applied,
        numerics=patches.numerics(applied, rewritten),
    )
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
    units: dict[str, tuple[str, ModelPlan]],
    manifest: Manifest,
    path: str,
    options: BuildOptions,
    weights: Mapping[str, torch.Tensor],
) -> Manifest:
    """The package at ``path`` of the one-model packages ``units`` (model name -> the unit's
    file and the plan it was built as), carrying ``manifest`` with its ``models`` set from them
    and its ``weights_sha256`` computed from the policy's ``weights`` (by name) and the units'
    constants (tdaot.builder.weights_digest; left out with a WeightSwapWarning where a model
    cannot be loaded here), sealed with the digests of its files; returns that manifest.

    Each model records whether it runs on the lite runtime (tdaot.builder.lite); a
    specialised model that does not is a LiteWarning, or with ``options.require_lite`` a
    BuildError.

    The package is written beside its destination and renamed into place, so a failed or
    interrupted build never leaves a half-written artifact.
    """
    path = check_output_path(path)
    built = [plan for _, plan in units.values()]
    files = {name: unit for name, (unit, _) in units.items()}
    digest, why = built_weights_sha256(weights, files, manifest)
    if digest is None and manifest.device == "cpu":
        warnings.warn(
            f"package {path!r} records no weights digest and cannot swap weights: {why}",
            WeightSwapWarning,
            stacklevel=3,  # the caller of tdaot.build
        )
    manifest = dataclasses.replace(manifest, models=model_specs(manifest, built), weights_sha256=digest)
    # Under the fixed archive name too (unit_path says why), beside its destination.
    with tempfile.TemporaryDirectory(prefix=".tdaot-", dir=os.path.dirname(path)) as folder:
        staging = os.path.join(folder, ARCHIVE_NAME + ".pt2")
        sealed = write_package(files, manifest, staging, bound={plan.name: plan.bound for plan in built})
        if CPU_TARGETS[manifest.cpu_target].cross:
            kept = lite.runnable_cross_models(sealed)  # the others would never run there
            if len(kept) < len(sealed.models):
                plans = [plan for plan in built if plan.name in kept]
                manifest = dataclasses.replace(manifest, models=model_specs(manifest, plans))
                files = {name: unit for name, unit in files.items() if name in kept}
                sealed = write_package(files, manifest, staging, bound={p.name: p.bound for p in plans})
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
    """The manifest's list of models: each plan's name, batches, tuning, chunk rows and the
    weights the runtime packs."""
    return tuple(
        ModelSpec(
            p.name,
            _served(p, manifest.batch),
            p.tuning,
            chunk_rows=p.chunk_rows,
            packed_weights=p.packed_weights,
            packed_convolutions=p.packed_convolutions,
        )
        for p in plans
    )
