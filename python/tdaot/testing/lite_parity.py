"""assert_parity(..., runtime="lite"): the package's lite models run by tdaot-lite in a
subprocess with no libtorch mapped (tdaot.testing.lite_runner), compared with eager."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import torch
from tensordict import TensorDictBase

import tdaot.testing.lite_runner as lite
from tdaot import keys as keyutil
from tdaot.builder.export import export_context
from tdaot.builder.pipeline import Artifact
from tdaot.manifest import Manifest, read_manifest
from tdaot.runtime import Policy
from tdaot.testing.report import (
    LITE_RESET_STEP,
    LITE_STEPS,
    ODD_BATCH,
    ParityReport,
    ParityRow,
    compare,
    eager_run,
    resize,
)


def assert_lite_parity(policy, artifact, example, batch_sizes, rtol, atol) -> ParityReport:
    __tracebackhide__ = True  # a failure points at the test that asked, not at this helper
    path, manifest = _package(artifact)
    if manifest.interaction_type == "random":
        raise ValueError(
            f"{path!r} samples inside the artifact (interaction type 'random'): "
            "outputs differ from eager by design; check it with assert_statistical_parity"
        )
    served = manifest.lite_batches()
    if not served:
        why = "; ".join(
            f"model {m.name!r} (batch {_served(m.batch)}): "
            + (m.lite.why if m.lite else "no lite record (built before tdaot recorded one)")
            for m in manifest.models
        )
        raise ValueError(
            f"{path!r} has no model that runs on the lite runtime, every model needs libtorch: {why}. "
            "Check it with runtime='torch', or build it with a specialised model (tuning 'auto' or "
            "'latency', or a static batch)"
        )
    if example.batch_dims == 0:
        example = example.unsqueeze(0)
    sizes = _lite_batch_sizes(batch_sizes, example.batch_size[0], manifest)
    tool = lite.find_tool_for(manifest.architecture)
    rows: list[ParityRow] = []
    libraries: list[str] = []
    for batch in sizes:
        if manifest.recurrent:
            steps, expected = _lite_rollout(policy, example, manifest, batch)
        else:
            inputs = resize(example, batch)
            with export_context(manifest.interaction_type), torch.no_grad():
                expected = [eager_run(policy, inputs, manifest.contract)]
            steps = [_lite_inputs(manifest, inputs)]
        result = lite.run(path, batch, steps if manifest.recurrent else steps[0], tool=tool)
        torch_mapped = lite.torch_libraries(result.libraries)
        if torch_mapped:
            raise AssertionError(
                f"the lite runtime's process ({tool} run {path!r} --batch {batch}) had libtorch mapped, "
                f"which the lite runtime must never load: {', '.join(torch_mapped)}"
            )
        libraries += result.libraries
        actual = [_lite_outputs(manifest, out, batch) for out in result.outputs]
        for spec in manifest.outputs:
            key = keyutil.td_key(keyutil.from_manifest(spec.key))
            rows.append(
                _compare_steps(
                    spec.key,
                    batch,
                    [e.get(key, None) for e in expected],
                    [a[spec.key] for a in actual],
                    rtol,
                    atol,
                )
            )
    report = ParityReport(tuple(rows), runtime="lite", libraries=tuple(dict.fromkeys(libraries)))
    if not report.ok:
        rollout = (
            f" (a rollout of {LITE_STEPS} steps; rows 0, 2, ... reset before step {LITE_RESET_STEP})"
            if manifest.recurrent
            else ""
        )
        raise AssertionError(
            f"the lite runtime ({tool}) on {path!r} differs from the eager policy{rollout}:\n{report.table()}"
        )
    return report


def _package(artifact) -> tuple[str, Manifest]:
    """The path and manifest of an artifact, without loading it into this process."""
    if isinstance(artifact, (Policy, Artifact)):
        return os.fspath(artifact.path), artifact.manifest
    return os.fspath(artifact), read_manifest(artifact)


def _served(batch_range) -> str:
    return f"{batch_range.min}..{batch_range.max}" if batch_range.dynamic else f"{batch_range.min}"


def _lite_batch_sizes(requested, example_batch: int, manifest: Manifest) -> list[int]:
    ranges = manifest.lite_batches().values()
    if requested is not None:
        sizes = list(requested)
        outside = [b for b in sizes if not any(b in r for r in ranges)]
        if outside:
            raise ValueError(
                f"batch sizes {outside} are not served by the lite runtime: the package's lite "
                f"runtime {manifest.lite_batches_described()}"
            )
        return sizes
    candidates = []
    for r in ranges:
        candidates += [r.min, *(b for b in (1, ODD_BATCH, example_batch) if r.dynamic and b in r)]
    return sorted(dict.fromkeys(candidates))


def _lite_inputs(manifest: Manifest, inputs: TensorDictBase, skip=()) -> dict[str, Any]:
    """The inputs of one tdaot-lite step: manifest key -> nested lists (exact for float32/64)."""
    return {
        spec.key: inputs.get(keyutil.td_key(keyutil.from_manifest(spec.key))).tolist()
        for spec in manifest.inputs
        if spec.key not in skip
    }


def _lite_outputs(manifest: Manifest, outputs: dict[str, Any], batch: int) -> dict[str, Any]:
    """One tdaot-lite step's outputs as tensors (a string where the tool printed none)."""
    tensors: dict[str, Any] = {}
    for spec in manifest.outputs:
        value = outputs.get(spec.key)
        if value is None or isinstance(value, str):
            tensors[spec.key] = value or "tdaot-lite printed none"
            continue
        tensors[spec.key] = torch.tensor(lite.flatten(value), dtype=spec.torch_dtype).reshape(
            batch, *spec.shape
        )
    return tensors


def _lite_rollout(policy, example, manifest: Manifest, batch: int):
    """(the tdaot-lite steps, the eager outputs per step) of a recurrent package's rollout: the
    example's rows, shifted by one row per step; the eager policy given its previous step's
    ("next", k) as state, zeros and is_init where a row starts (step 0, and rows 0, 2, ... before
    LITE_RESET_STEP); the lite runtime carrying its own state, told of the reset by __reset__."""
    recurrent = manifest.recurrent
    specs = {spec.key: spec for spec in manifest.inputs}
    skip = {pair.input for pair in recurrent.state} | ({recurrent.is_init} if recurrent.is_init else set())
    device = example.device
    carried = {
        pair.input: torch.zeros(
            batch, *specs[pair.input].shape, dtype=specs[pair.input].torch_dtype, device=device
        )
        for pair in recurrent.state
    }
    steps, expected = [], []
    for step in range(LITE_STEPS):
        rows = (torch.arange(batch) + step) % example.batch_size[0]
        inputs = example[rows.to(device)].contiguous()
        lite_step = _lite_inputs(manifest, inputs, skip)
        if step == 0:
            reset = torch.ones(batch, dtype=torch.bool)
        elif step == LITE_RESET_STEP:
            reset = torch.arange(batch) % 2 == 0
            lite_step[lite.RESET] = True if batch == 1 else reset.tolist()
        else:
            reset = torch.zeros(batch, dtype=torch.bool)
        steps.append(lite_step)
        reset = reset.to(device)
        eager_inputs = inputs.clone()
        for key, value in carried.items():
            value = value.clone()
            value[reset] = 0
            eager_inputs.set(keyutil.td_key(keyutil.from_manifest(key)), value)
        if recurrent.is_init:
            spec = specs[recurrent.is_init]
            flags = reset.view(batch, *[1] * len(spec.shape)).expand(batch, *spec.shape)
            eager_inputs.set(keyutil.td_key(keyutil.from_manifest(spec.key)), flags.to(spec.torch_dtype))
        with export_context(manifest.interaction_type), torch.no_grad():
            out = eager_run(policy, eager_inputs, manifest.contract)
        expected.append(out)
        carried = {
            pair.input: out.get(keyutil.td_key(keyutil.from_manifest(pair.output)))
            for pair in recurrent.state
        }
    return steps, expected


def _compare_steps(name, batch, expected: list, actual: list, rtol, atol) -> ParityRow:
    """One row for a key over the steps of a rollout (one step: as _compare); a mismatch names
    the first step that differs."""
    problem = next((a for a in actual if isinstance(a, str)), "")
    if problem:
        dtype = str(expected[0].dtype).replace("torch.", "") if isinstance(expected[0], torch.Tensor) else "-"
        return ParityRow(
            name, batch, dtype, float("nan"), float("nan"), rtol or 0.0, atol or 0.0, False, problem
        )
    if len(actual) == 1 or not all(isinstance(e, torch.Tensor) for e in expected):
        return compare(name, batch, expected[0], actual[0], rtol, atol)
    per_step = [compare(name, batch, e, a, rtol, atol) for e, a in zip(expected, actual)]
    first = next((i for i, row in enumerate(per_step) if not row.ok), None)
    if first is not None and per_step[first].problem:
        return per_step[first]
    row = compare(
        name,
        batch,
        torch.cat([e.detach().cpu() for e in expected]),
        torch.cat([a.cpu() for a in actual]),
        rtol,
        atol,
    )
    if first is not None:
        row = dataclasses.replace(row, within=False, problem=f"MISMATCH (first at step {first})")
    return row
