"""tdaot.build: tensordict policy + example TensorDict -> .pt2 package with a manifest.

The pipeline reads as plans -> units -> package: the policy is exported once (tdaot.builder.export's
Traces) into a package plan (its models and manifest; where the batch is dynamic, a static-batch
plan follows as the fallback), each model of the plan becomes a one-model unit, copied from the
artifact cache (tdaot.builder.cache) or compiled with the tuning's rewrites
(tdaot.builder.compile), and the units are sealed into the package with their file digests
(tdaot.builder.package).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import inspect
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import tensordict
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from tdaot._version import __version__
from tdaot.builder import lite, patches, rewrites
from tdaot.builder.cache import ArtifactCache, artifact_key, remember_refusal, remembered_refusal
from tdaot.builder.compile import build_package, compile_model, known_refusal, planned_manifest, unit_path
from tdaot.builder.cross_models import cross_manifest, cross_plans
from tdaot.builder.export import ExportedPolicy, Traces
from tdaot.builder.options import BuildOptions, fields
from tdaot.builder.package import check_output_path
from tdaot.builder.targets import CPU_TARGETS, architecture, vector_isa
from tdaot.builder.tuning import ModelPlan, calls_recurrent_ops, plan_models, rewrites_made, tune_plan
from tdaot.builder.weights_format import program_weights
from tdaot.errors import BuildError, CompileError, SpecialisationWarning, StaticBatchWarning
from tdaot.manifest import Manifest, Source, read_manifest


@dataclass(frozen=True)
class Artifact:
    """A built package: where it is, what it holds, and what building it cost."""

    path: str
    manifest: Manifest
    export_seconds: float
    compile_seconds: float  # or the cache copy's time on a hit
    cache_hit: bool = False
    exported_path: str | None = None  # the torch.export program, when saved
    signed_by: str | None = None  # the id of the key that signed it (sign_key)

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
    options: BuildOptions | None = None,
    *,
    factory: str | None = None,
    cache: ArtifactCache | str | os.PathLike | bool | None = True,
    on_status: Callable[[str], None] | None = None,
    **option_values,
) -> Artifact:
    """Export ``policy`` on ``example`` and compile it into a package at ``path``.

    ``example.batch_size[0]`` is the batch dim. The build options are a
    :class:`~tdaot.BuildOptions`, or its fields as keywords (``batch``, ``out_keys``,
    ``interaction_type``, ``device``, ``cpu_target``, ``kernel_threads``, ``tuning``,
    ``specialize``, ``sign_key``, ``save_exported``; keywords override ``options``); each is documented
    there. ``factory`` is recorded in the manifest as the artifact's source (the CLI passes
    "file.py:function"). ``cache``: each model built before from the same program, manifest and
    options is copied from the artifact cache instead of compiled; True or None (the default)
    uses the default cache folder (tdaot.builder.cache), a path or an ArtifactCache another,
    False none. ``on_status`` hears "exporting", then "compiling" (the dynamic model) and
    "compiling <name>" (a specialised one) for each model compiled, or "cached" when every model
    was a cache hit.
    """
    options = (options or BuildOptions()).replace(**option_values)
    report = on_status or (lambda status: None)
    path = check_output_path(os.fspath(path))
    key = checked_signing_key(options.sign_key, path)  # a bad key fails before the export
    if options.device == "cuda":
        if not torch.cuda.is_available():
            raise BuildError("device 'cuda' was asked for but torch sees no CUDA device on this host")
        # A copy, so building for CUDA does not move the caller's policy.
        policy, example = copy.deepcopy(policy).to("cuda"), example.to("cuda")
    started = time.perf_counter()
    report("exporting")
    packages = package_plans(policy, example, options, recorded_factory(factory))
    package = next(packages)
    # Once a build, not once a model: the patches of tdaot's table this torch does not take.
    patches.warn_lacking(
        (name for plan in package.models for name in patches.concerned(plan, package.manifest)), stacklevel=2
    )
    source = package.manifest.source
    exported_at = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=".tdaot-", dir=os.path.dirname(path)) as staging:
        while True:
            try:
                units, hits = make_units(package, staging, artifact_cache(cache), report)
                break
            except CompileError as err:
                fallback = next(packages, None)
                if fallback is None:
                    raise
                message = static_fallback_message(source, err, fallback)
                warnings.warn(message, StaticBatchWarning, stacklevel=2)
                package = fallback
        weights = program_weights(package.traces.main.program)
        build_package(units, package.manifest, path, package.options, weights)
    if all(hits):
        report("cached")
    if options.save_exported:
        # What went into the compiler for the package's first model: its rewrites included.
        plan = package.models[0]
        program = tune_plan(package.traces.for_plan(plan), plan)
        torch.export.save(program, exported_program_path(path))
    signed_by = None
    if key is not None:
        from tdaot.signing import sign

        signed_by = sign(path, key)
    return Artifact(
        path=path,
        manifest=read_manifest(path),  # the package's own: sealed with the files' digests
        export_seconds=exported_at - started,
        compile_seconds=time.perf_counter() - exported_at,
        cache_hit=all(hits),
        exported_path=exported_program_path(path) if options.save_exported else None,
        signed_by=signed_by,
    )


@dataclass(frozen=True)
class PackagePlan:
    """One package to make: the traces of the policy, the models (each one unit) and the
    manifest listing them, and the options they are built with."""

    traces: Traces
    models: tuple[ModelPlan, ...]
    manifest: Manifest
    options: BuildOptions


def package_plans(
    policy: TensorDictModuleBase, example: TensorDictBase, options: BuildOptions, factory: str | None
) -> Iterator[PackagePlan]:
    """The package asked for, then, where its batch is dynamic, the same at the example's static
    batch: inductor lowers some programs only with concrete sizes (torch 2.13 fails on the scan
    higher-order op of torchrl's recurrent "scan" backend when the batch is symbolic), and the
    build falls back to that plan when the first cannot be compiled. Each is exported when the
    build gets to it."""
    traces = Traces(policy, example, options)
    yield _package_plan(traces, factory)
    if traces.options.batch == "dynamic" and traces.main.batch.dynamic:
        yield _package_plan(Traces(policy, example, options.replace(batch="static")), factory)


def _package_plan(traces: Traces, factory: str | None) -> PackagePlan:
    options = traces.options
    manifest = _manifest(traces.main, options, Source(module_class=traces.module_class, factory=factory))
    models = tuple(_plans(traces.main, options, manifest.cpu_isa))
    target = CPU_TARGETS[options.cpu_target]
    if target.cross:
        models = tuple(cross_plans(list(models), manifest, architecture(target)))
        manifest = cross_manifest(manifest, list(models))
    if options.require_lite and not any(plan.tuning == "latency" for plan in models):
        raise BuildError(lite.no_specialised_model(traces.module_class))  # before compiling
    return PackagePlan(traces, models, planned_manifest(manifest, list(models), traces.main.program), options)


def static_fallback_message(source: Source, err: CompileError, fallback: PackagePlan) -> str:
    batch = fallback.manifest.batch.min
    return (
        f"{source.module_class} could not be compiled with a dynamic batch ({err}); building with a "
        f"static batch of {batch} instead. The artifact accepts only batch {batch}; build with "
        "batch='static' (--batch static) to skip the dynamic attempt."
    )


def artifact_cache(cache: ArtifactCache | str | os.PathLike | bool | None) -> ArtifactCache | None:
    """The artifact cache ``tdaot.build``'s ``cache`` argument names (see there)."""
    if cache is False:
        return None
    if cache is None or cache is True:
        return ArtifactCache()
    return cache if isinstance(cache, ArtifactCache) else ArtifactCache(cache)


def recorded_factory(factory: str | None) -> str | None:
    """The factory as the manifest records it: a FILE.py:FUNCTION with its file's absolute path,
    so that it resolves from any folder (tdaot rehearse --reference); a MODULE:FUNCTION as given."""
    if factory is None or ":" not in factory:
        return factory
    file, function = factory.rsplit(":", 1)
    if not file.endswith(".py"):
        return factory
    return f"{os.path.abspath(file)}:{function}"


def _with_option_keywords(function):
    """``function``'s signature with every BuildOptions field as a keyword, for help() and IDEs."""
    signature = inspect.signature(function)
    parameters = [p for p in signature.parameters.values() if p.kind != p.VAR_KEYWORD]
    parameters += [
        inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=f.type)
        for f in fields()
    ]
    function.__signature__ = signature.replace(parameters=parameters)
    return function


build = _with_option_keywords(build)


def _manifest(exported: ExportedPolicy, options: BuildOptions, source: Source) -> Manifest:
    target = CPU_TARGETS[options.cpu_target]
    return Manifest(
        inputs=exported.inputs,
        outputs=exported.outputs,
        batch=exported.batch,
        interaction_type=options.interaction_type,
        device=options.device,
        cpu_target=target.name,
        cpu_isa=vector_isa(target, limited=not patches.lacking(["vector_isas_limited_to"]))
        if options.device == "cpu"
        else "",
        architecture=architecture(target),
        torch_version=torch.__version__,
        tensordict_version=tensordict.__version__,
        tdaot_version=__version__,
        source=source,
        recurrent=exported.recurrent,
        custom_ops=exported.custom_ops,
        contract=options.contract,
    )


def checked_signing_key(sign_key: str | None, path: str):
    """The private key to sign with (tdaot.signing imports cryptography: only when asked)."""
    if sign_key is None:
        return None
    from tdaot.signing import load_private_key

    return load_private_key(sign_key, what=path)


def exported_program_path(package_path: str | os.PathLike) -> str:
    """Where ``save_exported`` puts the torch.export program of a package: NAME.ep.pt2."""
    stem = os.fspath(package_path)
    return (stem[: -len(".pt2")] if stem.endswith(".pt2") else stem) + ".ep.pt2"


def _plans(exported: ExportedPolicy, options: BuildOptions, vector_isa: str) -> list[ModelPlan]:
    batch = exported.batch
    program = exported.program
    recurrent = calls_recurrent_ops(program)
    plans = plan_models(
        options.tuning,
        options.specialize,
        options.device,
        batch.min,
        batch.max,
        recurrent,
        vector_isa,
        options.exact_math,
        rewrites.many_rows_products_differ(program),
    )
    # A dynamic model runs a call larger than the chunk in slices (tdaot.builder.tuning).
    rows = exported.chunk_rows

    def sliced(plan: ModelPlan) -> bool:
        return plan.batch is None and rows is not None and rows < (plan.batch_max or batch.max)

    # The weights a model hands to oneDNN (its matmul, its convolutions), which the runtime packs.
    products = {
        "wide_products_onednn": rewrites.wide_product_weights,
        "many_rows_products_onednn": rewrites.many_rows_product_weights,
    }
    convolutions = rewrites.onednn_convolution_weights(program)

    def packs(plan: ModelPlan) -> dict:
        made = rewrites_made(program, plan)
        packed = [products[name](program) for name in made if name in products]
        return {
            **({"packed_weights": packed[0]} if packed else {}),
            **({"packed_convolutions": convolutions} if "convolutions_onednn" in made else {}),
        }

    plans = [dataclasses.replace(p, chunk_rows=rows) if sliced(p) else p for p in plans]
    return [dataclasses.replace(p, **packs(p)) for p in plans]


def make_units(
    package: PackagePlan, staging: str, cache: ArtifactCache | None, report: Callable[[str], None]
) -> tuple[dict[str, tuple[str, ModelPlan]], list[bool]]:
    """Every model of ``package`` made into a one-model package (a unit) under ``staging``,
    copied from ``cache`` or compiled: model name -> (the unit, the plan it was built as), and
    for each whether it was a cache hit. A model left out (see :func:`make_unit`) has no unit."""
    units, hits = {}, []
    for plan in package.models:
        unit = unit_path(staging, plan.name)
        made = make_unit(package, plan, unit, cache, report)
        if made is not None:
            units[plan.name] = (unit, made[0])
            hits.append(made[1])
    return units, hits


def make_unit(
    package: PackagePlan, plan: ModelPlan, unit: str, cache: ArtifactCache | None, report
) -> tuple[ModelPlan, bool] | None:
    """The model ``plan`` of ``package`` at ``unit``, copied from ``cache`` or compiled: the plan
    it was built as and whether it was a cache hit, or None when it was left out.

    The cache key is of the package's own program (the policy's export) and the model's plan: a
    specialised model's own trace at its static batch is made only when it is compiled.

    A specialised model that cannot be compiled for the bound run (AOTInductor's array-ref
    interface does not take every graph, e.g. torch.cond) is built without it; one that
    cannot be compiled at all is left out. Both say so with a SpecialisationWarning. A refused
    bound attempt is remembered (tdaot.builder.cache) and one of a policy with custom operators
    known beforehand (tdaot.builder.compile.known_refusal): neither is compiled again. The
    package's own model ("model") raises its CompileError (the build falls back to a static batch).
    """
    manifest, options = package.manifest, package.options
    # A cross-built model unbound would need libtorch of its architecture (cross_models).
    unbound = plan.bound and not CPU_TARGETS[manifest.cpu_target].cross
    attempts = [plan, dataclasses.replace(plan, bound=False)] if unbound else [plan]
    for attempt in attempts:
        # A bound attempt's key also finds a refusal remembered without a cache.
        keyed = cache is not None or attempt.bound
        key = artifact_key(package.traces.main.program, manifest, options, attempt) if keyed else None
        refusal = remembered_refusal(cache, key) if attempt.bound else None
        if refusal is None and cache is not None and cache.fetch(key, unit):
            return attempt, True
        refusal = refusal or known_refusal(manifest, attempt)
        if refusal is None:
            report("compiling" if plan.name == "model" else f"compiling {plan.name}")
            try:
                compile_model(package.traces.for_plan(plan), manifest, options, attempt, unit)
            except CompileError as err:
                if plan.name == "model":
                    raise
                refusal = str(err)
                if attempt.bound:
                    remember_refusal(cache, key, refusal)
        if refusal is None:
            if cache is not None:
                cache.store(key, unit)
            return attempt, False
        what = "for the allocation-free bound run" if attempt.bound else "at all"
        if not unbound and plan.bound:  # cross-built: no other model serves its batch
            tail = "the package is built without it"
            tail += f" (nothing serves batch {plan.batch} on {manifest.architecture})"
        elif attempt.bound:
            tail = "it is built without it (a Binding at that batch uses the standard runner)"
        else:
            tail = "the package is built without it (the dynamic model serves that batch)"
        warnings.warn(
            f"the {_serving(plan)} model {plan.name!r} of {manifest.source.module_class} could "
            f"not be compiled {what} ({refusal}); " + tail,
            SpecialisationWarning,
            stacklevel=4,  # the caller of tdaot.build
        )
    return None


def _serving(plan: ModelPlan) -> str:
    return f"batch-{plan.batch}" if plan.batch else f"up-to-batch-{plan.batch_max}"


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
