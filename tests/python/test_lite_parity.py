"""tdaot.testing.assert_parity(..., runtime="lite"): the package's lite models run in a tdaot-lite
subprocess with no libtorch mapped (read from its /proc/self/maps) and match eager, for every
example package and torchrl family the suite builds that has lite models; recurrent packages over
a rollout with resets; what is refused (no lite model, a batch no lite model serves, an unknown
runtime); and how tdaot.testing.lite_runner finds the tool and reads a maps file.

No compile of its own: the session packages of conftest and those test_policies and
test_torchrl_as_they_come build (the same names, factories and options, so the suite compiles
each once; `make test-python` builds tdaot-lite first).
"""

from __future__ import annotations

import dataclasses
import os
import stat

import pytest
import torch
from examples import torchrl_policies as P
from test_policies import ARTIFACTS, STATIC_BATCH
from test_torchrl_as_they_come import PACKAGES as AS_THEY_COME

import tdaot
from tdaot.testing import LITE_RESET_STEP, LITE_STEPS, ParityReport, assert_parity
from tdaot.testing import lite_runner as lite


def _lite_parity(policy, artifact, example, **options) -> ParityReport:
    report = assert_parity(policy, artifact, example, runtime="lite", **options)
    assert report.runtime == "lite" and report.rows and all(row.ok for row in report.rows)
    # The lite runtime itself was mapped, and no libtorch or c10 (assert_parity checks that too).
    assert any(os.path.basename(f).startswith("libtdaot_lite.so") for f in report.libraries)
    assert not lite.torch_libraries(report.libraries)
    assert not [f for f in report.libraries if "torch" in os.path.basename(f)]
    return report


def _served(artifact) -> list[int]:
    return sorted(r.min for r in artifact.manifest.lite_batches().values())


# --- the example packages (examples/policies.py) -----------------------------------------
@pytest.mark.parametrize("name", ["tutorial", "nested", "legged"])
def test_example_package_matches_eager_on_the_lite_runtime(request, name):
    policy, example, artifact = request.getfixturevalue(name)
    report = _lite_parity(policy, artifact, example)
    # Every lite model's batch size, every output.
    assert {row.batch for row in report.rows} == set(_served(artifact)) == {1}
    assert {row.key for row in report.rows} == set(artifact.manifest.output_keys)


def test_every_lite_model_and_the_batches_asked_for(tutorial_b14):
    policy, example, artifact, _ = tutorial_b14
    assert _served(artifact) == [1, 4]
    assert {row.batch for row in _lite_parity(policy, artifact, example).rows} == {1, 4}
    # A path and a loaded policy work as the artifact does.
    report = _lite_parity(policy, artifact.path, example, batch_sizes=[4])
    assert {row.batch for row in report.rows} == {4}
    _lite_parity(policy, tdaot.load(artifact.path), example, batch_sizes=[1])


def test_a_batch_no_lite_model_serves_is_refused_naming_the_served_ones(tutorial_b14):
    policy, example, artifact, _ = tutorial_b14
    with pytest.raises(
        ValueError,
        match=r"batch sizes \[7\] are not served by the lite runtime: .* serves batch 1 \(model b1\), "
        r"4 \(model b4\)",
    ):
        assert_parity(policy, artifact, example, batch_sizes=[1, 7], runtime="lite")


def test_the_lite_runtime_is_compared_at_todays_tolerances(tutorial):
    policy, example, artifact = tutorial
    drifted = _drifted(policy, 1e-3)
    with pytest.raises(AssertionError) as caught:
        assert_parity(drifted, artifact, example, runtime="lite")
    message = str(caught.value)
    assert "the lite runtime" in message and "differs from the eager policy" in message
    # Today's table: header, then one row per key and batch.
    header, *rows = message.split("\n")[1:]
    assert header.split() == [
        "key",
        "batch",
        "dtype",
        "max",
        "abs",
        "err",
        "max",
        "rel",
        "err",
        "atol",
        "rtol",
        "result",
    ]
    assert {row.split()[0] for row in rows if row.endswith("MISMATCH")} >= {"loc", "sample"}
    # A tolerance given applies as it does for the full runtime.
    assert_parity(drifted, artifact, example, runtime="lite", atol=1e-1, rtol=0)


def _drifted(policy, by: float):
    import copy

    drifted = copy.deepcopy(policy)
    with torch.no_grad():
        next(p for p in drifted.parameters() if p.dim() == 1).add_(by)
    return drifted


# --- recurrent: a rollout with resets ------------------------------------------------------
def test_the_recurrent_example_matches_eager_over_a_rollout_with_resets(recurrent):
    policy, example, artifact = recurrent
    assert artifact.manifest.recurrent.is_init == "is_init"
    report = _lite_parity(policy, artifact, example)
    assert {row.key for row in report.rows} == {"action", "next.hidden"}


def test_a_rollout_that_resets_differently_from_eager_is_a_mismatch_naming_the_step(recurrent, monkeypatch):
    """If the lite steps carried no reset, the rows reset at LITE_RESET_STEP would differ there:
    the rollout really tests the carry and the reset."""
    policy, example, artifact = recurrent
    run = lite.run

    def without_resets(package, batch, steps, **options):
        return run(
            package, batch, [{k: v for k, v in s.items() if k != lite.RESET} for s in steps], **options
        )

    monkeypatch.setattr(lite, "run", without_resets)
    with pytest.raises(
        AssertionError,
        match=rf"rollout of {LITE_STEPS} steps.*\n(.*\n)*.*hidden .*MISMATCH "
        rf"\(first at step {LITE_RESET_STEP}\)",
    ):
        assert_parity(policy, artifact, example, runtime="lite")


def test_torchrl_recurrent_modules_match_eager_over_a_rollout_with_resets(build_package):
    """torchrl's GRUModule and LSTMModule as they come (test_torchrl_as_they_come's package):
    the batch-1 model runs lite, state carried by the lite runtime, is_init on reset."""
    factory, options = AS_THEY_COME["recurrent"]
    policy, example, artifact = build_package("as_they_come-recurrent", factory, options)
    assert artifact.manifest.recurrent and _served(artifact) == [1]
    report = _lite_parity(policy, artifact, example)
    assert {row.key for row in report.rows} == set(artifact.manifest.output_keys)
    assert any(row.key.startswith(f"next.{name}.") for name in P.RNNS for row in report.rows)


# --- the torchrl families of test_policies ---------------------------------------------------
LITE_FAMILIES = [
    name for name, (_, options) in ARTIFACTS.items() if options.get("interaction_type") != "random"
]


@pytest.mark.parametrize("name", LITE_FAMILIES)
def test_torchrl_family_matches_eager_on_the_lite_runtime(build_package, name):
    factory, options = ARTIFACTS[name]
    policy, example, artifact = build_package(f"policies-{name}", factory, options, STATIC_BATCH.get(name))
    if not artifact.manifest.lite_batches():
        # Said aloud (pytest -ra), not hidden: the goal is that every family runs lite.
        why = "; ".join(f"{m.name}: {m.lite.why if m.lite else '-'}" for m in artifact.manifest.models)
        pytest.xfail(f"{name} has no lite model yet ({why})")
    _lite_parity(policy, artifact, example)


# --- refused ---------------------------------------------------------------------------------
def test_a_package_with_no_lite_model_is_refused_saying_why(build_package):
    """A tuning="throughput" package (test_torchrl_as_they_come's) holds only the dynamic-batch
    model, which needs libtorch."""
    factory, options = AS_THEY_COME["normalized"]
    policy, example, artifact = build_package("as_they_come-normalized", factory, options)
    assert options == {"tuning": "throughput"}
    with pytest.raises(
        ValueError,
        match=r"as_they_come-normalized.pt2' has no model that runs on the lite runtime, every model needs "
        r"libtorch: model 'model' \(batch 1..1048576\): dynamic-batch throughput model: .*runtime='torch'",
    ):
        assert_parity(policy, artifact, example, runtime="lite")


def test_a_package_without_lite_records_is_refused(tutorial):
    policy, example, artifact = tutorial
    bare = dataclasses.replace(
        artifact,
        manifest=dataclasses.replace(
            artifact.manifest,
            models=tuple(dataclasses.replace(m, lite=None) for m in artifact.manifest.models),
        ),
    )
    with pytest.raises(ValueError, match=r"model 'b1' \(batch 1\): no lite record"):
        assert_parity(policy, bare, example, runtime="lite")


def test_an_unknown_runtime_is_refused_naming_the_choices(tutorial):
    policy, example, artifact = tutorial
    with pytest.raises(ValueError, match=r"runtime='bogus': expected 'torch' .* or 'lite'"):
        assert_parity(policy, artifact, example, runtime="bogus")


def test_the_default_runtime_is_the_full_one(tutorial_native, tutorial):
    policy, example, _ = tutorial
    report = assert_parity(policy, tutorial_native, example, batch_sizes=[7])
    assert report.runtime == "torch" and not report.libraries


# --- libtorch in the lite process --------------------------------------------------------------
FAKE_MAPS = """\
55d0c0a00000-55d0c0a10000 r--p 00000000 08:01 131 /usr/local/bin/tdaot-lite
7f1c2a000000-7f1c2a100000 r-xp 00010000 08:01 132 /opt/venv/site-packages/torch/lib/libtorch_cpu.so
7f1c2b000000-7f1c2b100000 r--p 00000000 08:01 133 /opt/venv/site-packages/torch/lib/libc10.so
7f1c2b100000-7f1c2b200000 r-xp 00000000 08:01 134 /usr/lib/x86_64-linux-gnu/libsleef.so.3.6 (deleted)
7f1c2c000000-7f1c2c100000 rw-p 00000000 00:00 0
7f1c2d000000-7f1c2d100000 r-xp 00000000 08:01 135 /tmp/pkg/data/aotinductor/b1/torch_model.so
7f1c2d100000-7f1c2d200000 r-xp 00000000 08:01 136 /usr/lib/libtdaot_lite.so
7ffd1e000000-7ffd1e021000 rw-p 00000000 00:00 0                          [stack]
7ffd1e1f0000-7ffd1e1f2000 r-xp 00000000 00:00 0                          [vdso]
"""


def test_the_maps_reader_names_the_torch_libraries():
    files = lite.mapped_files(FAKE_MAPS)
    assert files == [
        "/usr/local/bin/tdaot-lite",
        "/opt/venv/site-packages/torch/lib/libtorch_cpu.so",
        "/opt/venv/site-packages/torch/lib/libc10.so",
        "/usr/lib/x86_64-linux-gnu/libsleef.so.3.6",
        "/tmp/pkg/data/aotinductor/b1/torch_model.so",
        "/usr/lib/libtdaot_lite.so",
    ]
    assert lite.torch_libraries(files) == files[1:3]
    more = ["/x/libtorch.so", "/x/libtorch_cuda.so.2", "/x/libc10_cuda.so", "/x/libtorch_python.so"]
    assert lite.torch_libraries(more) == more
    assert lite.torch_libraries(["/x/libtorchvision_model.txt", "/x/libc10x.so", "/x/libtdaot_lite.so"]) == []


def test_libtorch_mapped_in_the_lite_process_fails_naming_the_files(tutorial, monkeypatch):
    policy, example, artifact = tutorial
    run = lite.run

    def with_torch(*args, **options):
        result = run(*args, **options)
        return dataclasses.replace(result, libraries=(*result.libraries, *lite.mapped_files(FAKE_MAPS)))

    monkeypatch.setattr(lite, "run", with_torch)
    with pytest.raises(
        AssertionError,
        match=r"the lite runtime's process \(.*tdaot-lite run .*tutorial.pt2' --batch 1\) had libtorch "
        r"mapped, .*: /opt/venv/.*/libtorch_cpu.so, /opt/venv/.*/libc10.so$",
    ):
        assert_parity(policy, artifact, example, runtime="lite")


# --- finding the tool --------------------------------------------------------------------------
def test_the_tool_is_found_from_the_environment_then_the_package_then_path_then_the_checkout(
    tmp_path, monkeypatch
):
    fake = tmp_path / "bin" / "tdaot-lite"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv(lite.ENV, str(fake))
    assert lite.find_tool() == str(fake)
    monkeypatch.setenv(lite.ENV, str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match=r"TDAOT_LITE='.*missing' is not an executable file"):
        lite.find_tool()

    monkeypatch.delenv(lite.ENV)
    packaged = tmp_path / "pkg" / lite.PACKAGED
    packaged.parent.mkdir(parents=True)
    packaged.write_bytes(fake.read_bytes())
    packaged.chmod(0o755)
    monkeypatch.setattr(lite, "package_dirs", lambda: [str(tmp_path / "pkg")])
    assert lite.find_tool() == str(packaged)
    packaged.unlink()
    monkeypatch.setenv("PATH", str(fake.parent))
    assert lite.find_tool() == str(fake)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(lite, "CHECKOUT", tmp_path / "build" / "cpp" / "tdaot-lite")
    with pytest.raises(FileNotFoundError, match=r"tdaot-lite .* was not found: .*pip install.*TDAOT_LITE"):
        lite.find_tool()


def test_the_tools_errors_come_back_with_its_message(tutorial):
    _, _, artifact = tutorial
    with pytest.raises(
        lite.LiteToolError, match=r"--batch 3: .*no lite model for batch size 3.*serves batch sizes 1"
    ) as caught:
        lite.run(artifact.path, 3, {})
    assert caught.value.returncode == 1
    with pytest.raises(ValueError, match=r"JSON, which holds no NaN"):
        lite.run(artifact.path, 1, {"observation": [[float("nan")] * 3]})
