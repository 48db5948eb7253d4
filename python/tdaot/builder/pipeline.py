"""tdaot.build: tensordict policy + example TensorDict -> .pt2 package with a manifest.

The pipeline is a straight line: options checked -> export (tdaot.builder.export) -> manifest
-> compile, with the tuning's rewrites (tdaot.builder.compile), or a cache hit
(tdaot.builder.cache) -> package sealed with its file digests (tdaot.builder.package).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import inspect
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import tensordict
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from tdaot._version import __version__
from tdaot.builder import lite
from tdaot.builder.cache import ArtifactCache, artifact_key, remember_refusal, remembered_refusal
from tdaot.builder.compile import build_package, compile_model, known_refusal
from tdaot.builder.export import ExportedPolicy, export_policy
from tdaot.builder.messages import module_class_name
from tdaot.builder.options import BuildOptions, fields
from tdaot.builder.package import check_output_path
from tdaot.builder.targets import CPU_TARGETS, vector_isa
from tdaot.builder.tuning import ModelPlan, calls_recurrent_ops, plan_models, tune_program
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
    cache: ArtifactCache | None = None,
    on_status: Callable[[str], None] | None = None,
    **option_values,
) -> Artifact:
    """Export ``policy`` on ``example`` and compile it into a package at ``path``.

    ``example.batch_size[0]`` is the batch dim. The build options are a
    :class:`~tdaot.BuildOptions`, or its fields as keywords (``batch``, ``out_keys``,
    ``interaction_type``, ``device``, ``cpu_target``, ``kernel_threads``, ``tuning``,
    ``specialize``, ``sign_key``, ``save_exported``; keywords override ``options``); each is documented
    there. ``factory`` is recorded in the manifest as the artifact's source (the CLI passes
    "file.py:function"). With a ``cache``, each model built before from the same program,
    manifest and options is copied instead of compiled. ``on_status`` hears "exporting",
    then "compiling" (the dynamic model) and "compiling <name>" (a specialised one) for each
    model compiled, or "cached" when every model was a cache hit.
    """
    options = (options or BuildOptions()).replace(**option_values)
    report = on_status or (lambda status: None)
    path = check_output_path(os.fspath(path))
    signing_key = _signing_key(options.sign_key, path)  # a bad key fails before the export
    if options.device == "cuda":
        if not torch.cuda.is_available():
            raise BuildError("device 'cuda' was asked for but torch sees no CUDA device on this host")
        # A copy, so building for CUDA does not move the caller's policy.
        policy, example = copy.deepcopy(policy).to("cuda"), example.to("cuda")

    started = time.perf_counter()
    report("exporting")
    exported = export_policy(policy, example, options)
    exported_at = time.perf_counter()
    manifest = _manifest(exported, policy, options, factory)
    try:
        cache_hit = _compile(policy, example, exported, manifest, path, options, cache, report)
    except CompileError as err:
        if not (options.batch == "dynamic" and exported.batch.dynamic):
            raise
        # Inductor lowers some programs only with concrete sizes (torch 2.13 fails on
        # the scan higher-order op of torchrl's recurrent "scan" backend when the
        # batch is symbolic). As for a policy that specialises the batch while
        # tracing: fall back to the example's batch, and say so.
        options = options.replace(batch="static")
        exported = export_policy(policy, example, options)
        warnings.warn(
            f"{manifest.source.module_class} could not be compiled with a dynamic batch ({err}); "
            f"building with a static batch of {exported.batch.min} instead. The artifact accepts "
            f"only batch {exported.batch.min}; build with batch='static' (--batch static) to skip "
            "the dynamic attempt.",
            StaticBatchWarning,
            stacklevel=2,
        )
        manifest = _manifest(exported, policy, options, factory)
        cache_hit = _compile(policy, example, exported, manifest, path, options, cache, report)
    if options.save_exported:
        # What went into the compiler for the package's first model: its rewrites included.
        plan = _plans(exported, options)[0]
        program = tune_program(exported.program, plan.tuning, plan.bound, plan.decomposed)
        torch.export.save(program, exported_program_path(path))
    signed_by = None
    if signing_key is not None:
        from tdaot.signing import sign

        signed_by = sign(path, signing_key)
    return Artifact(
        path=path,
        manifest=read_manifest(path),  # the package's own: sealed with the files' digests
        export_seconds=exported_at - started,
        compile_seconds=time.perf_counter() - exported_at,
        cache_hit=cache_hit,
        exported_path=exported_program_path(path) if options.save_exported else None,
        signed_by=signed_by,
    )


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


def _manifest(exported: ExportedPolicy, policy, options: BuildOptions, factory: str | None) -> Manifest:
    target = CPU_TARGETS[options.cpu_target]
    return Manifest(
        inputs=exported.inputs,
        outputs=exported.outputs,
        batch=exported.batch,
        interaction_type=options.interaction_type,
        device=options.device,
        cpu_target=target.name,
        cpu_isa=vector_isa(target) if options.device == "cpu" else "",
        torch_version=torch.__version__,
        tensordict_version=tensordict.__version__,
        tdaot_version=__version__,
        source=Source(module_class=module_class_name(policy), factory=factory),
        recurrent=exported.recurrent,
        custom_ops=exported.custom_ops,
        contract=options.contract,
    )


def _signing_key(sign_key: str | None, path: str):
    """The private key to sign with (tdaot.signing imports cryptography: only when asked)."""
    if sign_key is None:
        return None
    from tdaot.signing import load_private_key

    return load_private_key(sign_key, what=path)


def exported_program_path(package_path: str | os.PathLike) -> str:
    """Where ``save_exported`` puts the torch.export program of a package: NAME.ep.pt2."""
    stem = os.fspath(package_path)
    return (stem[: -len(".pt2")] if stem.endswith(".pt2") else stem) + ".ep.pt2"


def _plans(exported: ExportedPolicy, options: BuildOptions) -> list[ModelPlan]:
    batch = exported.batch
    recurrent = calls_recurrent_ops(exported.program)
    plans = plan_models(options.tuning, options.specialize, options.device, batch.min, batch.max, recurrent)
    # A dynamic model runs a call larger than the chunk in slices (tdaot.builder.tuning).
    rows = exported.chunk_rows

    def sliced(plan: ModelPlan) -> bool:
        return plan.batch is None and rows is not None and rows < (plan.batch_max or batch.max)

    return [dataclasses.replace(p, chunk_rows=rows) if sliced(p) else p for p in plans]


def _compile(policy, example, exported, manifest, path, options, cache, report) -> bool:
    """Compiles every model of the package (a specialised one exported again at its static
    batch), or copies it from ``cache``, into ``path``; True when every model was a cache hit.

    A specialised model that cannot be compiled for the bound run (AOTInductor's array-ref
    interface does not take every graph, e.g. torch.cond) is built without it; one that
    cannot be compiled at all is left out. Both say so with a SpecialisationWarning. A refused
    bound attempt is remembered (tdaot.builder.cache) and one of a policy with custom operators
    known beforehand (tdaot.builder.compile.known_refusal): neither is compiled again.
    """
    plans = _plans(exported, options)
    if options.require_lite and not any(plan.tuning == "latency" for plan in plans):
        raise BuildError(lite.no_specialised_model(manifest.source.module_class))  # before compiling
    models = {}
    for plan in plans:
        program = exported.program
        if plan.bound or (plan.batch is not None and exported.batch.dynamic):
            # At the model's static batch; a bound model's outputs each in a buffer of its own.
            specialised = options.replace(batch=plan.batch or "static")
            program = export_policy(policy, example, specialised, own_outputs=plan.bound).program
        models[plan.name] = (program, plan)
    hits = []

    def make_unit(program, plan: ModelPlan, staging: str) -> ModelPlan | None:
        attempts = [plan, dataclasses.replace(plan, bound=False)] if plan.bound else [plan]
        for attempt in attempts:
            # A bound attempt's key also finds a refusal remembered without a cache.
            keyed = cache is not None or attempt.bound
            key = artifact_key(program, manifest, options, attempt) if keyed else None
            refusal = remembered_refusal(cache, key) if attempt.bound else None
            if refusal is None and cache is not None and cache.fetch(key, staging):
                hits.append(True)
                return attempt
            refusal = refusal or known_refusal(manifest, attempt)
            if refusal is None:
                report("compiling" if plan.name == "model" else f"compiling {plan.name}")
                try:
                    compile_model(program, manifest, options, attempt, staging)
                except CompileError as err:
                    if plan.name == "model":
                        raise  # the package's own model: the caller decides (static fallback)
                    refusal = str(err)
                    if attempt.bound:
                        remember_refusal(cache, key, refusal)
            if refusal is not None:
                what = "for the allocation-free bound run" if attempt.bound else "at all"
                warnings.warn(
                    f"the {_serving(plan)} model {plan.name!r} of {manifest.source.module_class} could "
                    f"not be compiled {what} ({refusal}); "
                    + (
                        "it is built without it (a Binding at that batch uses the standard runner)"
                        if attempt.bound
                        else "the package is built without it (the dynamic model serves that batch)"
                    ),
                    SpecialisationWarning,
                    stacklevel=5,  # the caller of tdaot.build
                )
                continue
            if cache is not None:
                cache.store(key, staging)
            hits.append(False)
            return attempt
        return None

    build_package(models, manifest, path, options, make_unit)
    if hits and all(hits):
        report("cached")
    return bool(hits) and all(hits)


def _serving(plan: ModelPlan) -> str:
    return f"batch-{plan.batch}" if plan.batch else f"up-to-batch-{plan.batch_max}"


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
