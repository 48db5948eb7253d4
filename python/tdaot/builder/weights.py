"""tdaot.export_weights: a retrained policy's weights as a weight file for a package's hot swap
(``native.swap_weights``; the format is tdaot.builder.weights_format's).

The policy is exported again as the base package's models were, checked against what each
model recorded when it was built (parameter and buffer names, shapes, dtypes, then the graph),
and every model is compiled again with the base package's options, so that the constants it
derives from the weights (the C++ GEMM template's packed weights) are computed here, for the
target, and the runtime only copies them in.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile

import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModuleBase

from tdaot import _C, _torch_compat
from tdaot import keys as keyutil
from tdaot.builder.compile import compile_model
from tdaot.builder.export import Traces
from tdaot.builder.options import BuildOptions
from tdaot.builder.pipeline import _signing_key, file_sha256
from tdaot.builder.tuning import ModelPlan, plan_key_parts
from tdaot.builder.weights_format import RECORD_KEY, graph_digest, program_weights, write_weight_file
from tdaot.errors import WeightsError
from tdaot.manifest import Manifest, read_manifest
from tdaot.versions import same_torch_release


def export_weights(
    policy: TensorDictModuleBase,
    base: str | os.PathLike = "policy.pt2",
    out: str | os.PathLike = "policy-v2.tdw",
    *,
    example: TensorDict | None = None,
    sign_key: str | os.PathLike | None = None,
) -> str:
    """Writes the weights of ``policy`` (same architecture as the package ``base`` was built
    from, e.g. retrained) to the weight file ``out`` for ``base``'s hot swap; returns their
    sha256 (what ``native.weights_sha256`` reports once they are live).

    Raises :class:`tdaot.WeightsError` naming the first difference when the policy's exported
    structure (parameter and buffer names, shapes, dtypes, graph) is not the base package's.
    ``example`` is an input TensorDict; default: zeros shaped as the manifest's inputs.
    Compiles every model of the package again (the time a build takes). ``sign_key`` (the
    path of an Ed25519 private key, as for ``tdaot.build``) signs the file when it is written
    (:func:`tdaot.sign`); the key is checked before anything is compiled."""
    base = os.fspath(base)
    signing_key = _signing_key(sign_key, os.fspath(out))  # a bad key fails before the compiles
    manifest = read_manifest(base)
    records = _torch_compat.read_archive(base)
    built = {spec.name: _record(records, spec.name, base) for spec in manifest.models}
    if manifest.device != "cpu":
        raise WeightsError(
            f"package {base!r} is a {manifest.device} package; "
            "export_weights makes weight files for cpu packages only",
            base,
        )
    if not same_torch_release(manifest.torch_version, torch.__version__):
        raise WeightsError(
            f"package {base!r} was built with torch {manifest.torch_version}, this process runs torch "
            f"{torch.__version__}: make its weight files with the torch it was built with",
            base,
        )
    for name, record in built.items():
        check_tuning(record, base, name)
    first = next(iter(built.values()))
    options = BuildOptions(
        batch=_batch(first["export"]["batch"]),
        out_keys=_out_keys(first["export"]["out_keys"]),
        interaction_type=manifest.interaction_type,
        cpu_target=manifest.cpu_target,
        kernel_threads=first["kernel_threads"],
    )
    example = example if example is not None else _zeros_example(manifest)
    traces = Traces(policy, example, options)
    weights = program_weights(traces.main.program)
    models = {}
    with tempfile.TemporaryDirectory(prefix="tdaot-weights-") as staging:
        for spec in manifest.models:
            record = built[spec.name]
            plan = ModelPlan(**record["plan"])
            program = traces.for_plan(plan)
            check_structure(program, record, base, spec.name)
            unit = os.path.join(staging, spec.name + ".pt2")
            compile_model(program, manifest, options, plan, unit)
            try:
                models[spec.name] = _torch_compat.compiled_constants(_torch_compat.read_archive(unit))
            except RuntimeError as err:
                raise WeightsError(
                    f"model {spec.name!r} of package {base!r} cannot swap weights: {err}", base
                ) from err
    out = os.fspath(out)
    for name, value in weights.items():
        if value.is_floating_point() and not torch.isfinite(value).all():
            raise WeightsError(f"weight {name!r} of the policy holds values that are not finite", out, name)
    digest = write_weight_file(out, weights, models, *package_identity(base))
    if signing_key is not None:
        from tdaot.signing import sign

        sign(out, signing_key)
    return digest


def check_tuning(record: dict, base: str, model: str) -> None:
    """Raises WeightsError unless this tdaot compiles model ``model`` of the package ``base`` with
    the tuning it was built with (``record["tuning"]``, the model's cache_key_parts). The
    constants a swap carries are compiled here; a rewrite that orders or packs them differently
    (another tdaot's rewrites) would give constants of the right names and shapes in the wrong
    layout, which no check at swap time could see. (The torch that compiles them must be the
    package's too: export_weights checks that once.)"""
    where = f"package {base!r} (model {model!r})"
    plan = ModelPlan(**record["plan"])
    ours = plan_key_parts(plan)
    theirs = record.get("tuning")
    if theirs is None:
        raise WeightsError(
            f"{where} does not record its tuning: it was built by an earlier tdaot, whose compiled "
            "constants this tdaot cannot vouch for; build it again to swap its weights",
            base,
        )
    if theirs != ours:
        changed = sorted(k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k))
        raise WeightsError(
            f"{where} was built with another tuning than this tdaot compiles it with (differs in "
            f"{', '.join(map(repr, changed))}: {theirs} vs {ours}); build it again to swap its weights",
            base,
        )


def check_structure(program: torch.export.ExportedProgram, record: dict, base: str, model: str) -> None:
    """Raises WeightsError naming the first difference between ``program`` and what model
    ``model`` of the package ``base`` recorded: a parameter or buffer missing, extra, of
    another shape or dtype, then the graph."""
    ours = {name: [str(v.dtype), list(v.shape)] for name, v in program_weights(program).items()}
    theirs = record["tensors"]
    where = f"the policy does not have the structure of package {base!r} (model {model!r}): "
    for name in sorted(set(ours) | set(theirs)):
        if name not in ours:
            raise WeightsError(
                where + f"it lacks {name!r} ({_describe(theirs[name])} in the package)", base, name
            )
        if name not in theirs:
            raise WeightsError(
                where + f"it has {name!r} ({_describe(ours[name])}), which the package does not", base, name
            )
        if ours[name] != theirs[name]:
            raise WeightsError(
                where + f"{name!r} is {_describe(ours[name])}, the package's is {_describe(theirs[name])}",
                base,
                name,
            )
    if graph_digest(program) != record["graph"]:
        raise WeightsError(where + "its exported graph differs (same weights, other computation)", base)


def _describe(entry: list) -> str:
    dtype, shape = entry
    return f"{dtype.removeprefix('torch.')} {list(shape)}"


def _record(records: dict[str, bytes], model: str, base: str) -> dict:
    """What model ``model`` of the package recorded for weight swaps when it was built."""
    prefix = f"data/aotinductor/{model}/"
    for name, data in records.items():
        if name.startswith(prefix) and name.endswith("_metadata.json"):
            metadata = json.loads(data)
            if RECORD_KEY in metadata:
                return json.loads(metadata[RECORD_KEY])
    raise WeightsError(
        f"package {base!r} (model {model!r}) records nothing about its weights: it was built by a tdaot "
        "without weight swap; build it again to swap its weights",
        base,
    )


def _batch(value):
    return tuple(value) if isinstance(value, list) else value


def _out_keys(value):
    return None if value is None else tuple(tuple(key) for key in value)


def _zeros_example(manifest: Manifest) -> TensorDict:
    """Zero inputs as the manifest describes them, at a batch of 2 where the package serves it."""
    batch = 2 if 2 in manifest.batch else manifest.batch.min
    values = {
        keyutil.td_key(keyutil.from_manifest(spec.key)): torch.zeros(
            batch, *spec.shape, dtype=spec.torch_dtype
        )
        for spec in manifest.inputs
    }
    return TensorDict(values, batch_size=[batch])


def package_identity(package: str | os.PathLike) -> tuple[str, str]:
    """(sha256 of the package file, sha256 of its manifest bytes), as a weight file records its
    base package. A swap matches the manifest's: it holds every file's digest, and signing the
    package (again) changes the file but not the manifest."""
    manifest = _C.read_manifest_bytes(os.fspath(package))
    return file_sha256(package), hashlib.sha256(manifest).hexdigest()
