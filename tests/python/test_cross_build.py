"""cpu_target="aarch64" without compiling: its toolchain and what is missing of it (by name), its
inductor options and ISA, which models an aarch64 package holds and what it refuses, the
option's spellings (Python, CLI, CI config). Building and running one is tests/python/test_aarch64.py.
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import pytest

from tdaot.builder import cross
from tdaot.builder.config import parse_config
from tdaot.builder.cross_models import cross_manifest, cross_plans
from tdaot.builder.options import BuildOptions
from tdaot.builder.targets import CPU_TARGETS, architecture, inductor_options, vector_isa
from tdaot.builder.tuning import ModelPlan
from tdaot.errors import BuildError, LiteWarning
from tdaot.manifest import BatchRange, Manifest, Source

HAS_CROSS = shutil.which(cross.CROSS_COMPILER) is not None and any(map(os.path.isfile, cross.SLEEF_HEADERS))


def test_a_missing_compiler_is_named_with_how_to_install_it(monkeypatch):
    monkeypatch.setenv(cross.COMPILER_ENV, "/nowhere/aarch64-g++")
    with pytest.raises(
        BuildError,
        match=r"cpu_target 'aarch64' needs the C\+\+ compiler '/nowhere/aarch64-g\+\+' "
        r"\(TDAOT_AARCH64_CXX\), which is not on PATH; on Debian or Ubuntu: "
        r".*g\+\+-aarch64-linux-gnu libsleef-dev:arm64",
    ):
        cross.toolchain("aarch64")
    with pytest.raises(BuildError, match=r"cross-compiles for aarch64 only, not 'riscv64'"):
        cross.toolchain("riscv64")


def test_a_missing_arm64_sleef_header_is_named(monkeypatch):
    monkeypatch.setenv(cross.COMPILER_ENV, shutil.which("sh"))
    monkeypatch.setattr(cross, "host_architecture", lambda: "x86_64")
    monkeypatch.setattr(cross, "SLEEF_HEADERS", ("/nowhere/sleef.h",))
    with pytest.raises(
        BuildError, match=r"needs the arm64 SLEEF header \(/nowhere/sleef.h\), which torch's NEON"
    ):
        cross.toolchain("aarch64")


@pytest.mark.skipif(
    not HAS_CROSS, reason="no aarch64 cross compiler or arm64 SLEEF header (make lite-aarch64)"
)
def test_the_toolchain_puts_debians_arm64_sleef_header_first():
    chain = cross.toolchain("aarch64")
    assert chain.compiler == shutil.which(cross.CROSS_COMPILER)
    header = Path(chain.include_first) / "sleef.h"
    assert os.listdir(chain.include_first) == ["sleef.h"]
    assert header.read_bytes() == Path(next(filter(os.path.isfile, cross.SLEEF_HEADERS))).read_bytes()
    assert b"Sleef_tanhf4_u10(float32x4_t)" in header.read_bytes()


@pytest.mark.skipif(
    not HAS_CROSS, reason="no aarch64 cross compiler or arm64 SLEEF header (make lite-aarch64)"
)
def test_the_aarch64_target_generates_neon_for_the_cross_compiler():
    target = CPU_TARGETS["aarch64"]
    assert target.cross and architecture(target) == "aarch64"
    assert architecture(CPU_TARGETS["native"]) == cross.host_architecture()
    options = inductor_options(target)
    assert options["cpp.march"] == "armv8-a" and options["cpp.simdlen"] == 128
    assert options["cpp.cxx"].endswith(cross.CROSS_COMPILER)
    assert vector_isa(target) == "asimd"


def _manifest(**changes) -> Manifest:
    values = dict(
        inputs=(),
        outputs=(),
        batch=BatchRange(1, 64),
        interaction_type="deterministic",
        device="cpu",
        cpu_target="aarch64",
        cpu_isa="asimd",
        torch_version="2.13.0",
        tensordict_version="0.14.3",
        tdaot_version="0.2.0",
        source=Source(module_class="Walk"),
        architecture="aarch64",
    )
    return Manifest(**{**values, **changes})


def test_an_aarch64_package_keeps_its_static_lite_models_and_names_each_one_left_out():
    plans = [
        ModelPlan("model", "throughput"),
        ModelPlan("b1", "latency", 1, True),
        ModelPlan("b4", "latency", 4, True),
        ModelPlan("b32", "throughput", 32),
    ]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kept = cross_plans(plans, _manifest(), "aarch64")
    assert [p.name for p in kept] == ["b1", "b4"]
    messages = [str(w.message) for w in caught if w.category is LiteWarning]
    assert len(messages) == 2
    assert (
        "Walk: the dynamic-batch model 'model' needs libtorch, which is not built for aarch64" in messages[0]
    )
    assert "the batch-32 model 'b32' is throughput tuned (above 16 rows) and needs libtorch" in messages[1]
    assert cross_manifest(_manifest(), kept).batch == BatchRange(1, 4)


def test_an_aarch64_package_of_no_runnable_model_is_refused_by_name():
    with pytest.raises(
        BuildError,
        match=r"cpu_target 'aarch64': Walk has no model that runs on aarch64 .* specialised batches "
        r"are: 32\); build with specialize=\[1\]",
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LiteWarning)
            cross_plans(
                [ModelPlan("model", "throughput"), ModelPlan("b32", "throughput", 32)], _manifest(), "aarch64"
            )


def test_the_option_in_python_the_cli_and_a_ci_config(tmp_path):
    assert BuildOptions(cpu_target="aarch64").cpu_target == "aarch64"
    with pytest.raises(BuildError, match=r"aarch64"):
        BuildOptions(cpu_target="arm64")  # the message lists the targets, aarch64 among them
    (tmp_path / "p.py").write_text("def walk():\n    pass\n")
    data = {
        "defaults": {"cpu_targets": ["x86-64-v3", "aarch64"]},
        "artifact": [{"name": "walk", "factory": "p.py:walk"}],
    }
    specs = parse_config(data, Path(tmp_path), "tdaot.toml")
    assert [s.options.cpu_target for s in specs] == ["x86-64-v3", "aarch64"]
    assert [os.path.basename(s.output) for s in specs] == ["walk-x86-64-v3.pt2", "walk-aarch64.pt2"]


def test_a_model_the_aarch64_lite_runtime_lacks_an_op_for_is_left_out_or_the_build_refused():
    from tdaot.builder.lite import runnable_cross_models
    from tdaot.manifest import LiteSupport, ModelSpec

    lacks = LiteSupport(
        runs=False,
        needs=("aoti_torch_cpu_grid_sampler_2d",),
        missing=("aoti_torch_cpu_grid_sampler_2d",),
        why="needs libtorch: aoti_torch_cpu_grid_sampler_2d (ATen grid_sampler_2d)",
    )
    b1 = ModelSpec("b1", BatchRange(1, 1), "latency", LiteSupport(runs=True, needs=()))
    b4 = ModelSpec("b4", BatchRange(4, 4), "latency", lacks)
    with pytest.warns(
        LiteWarning,
        match=r"Walk: model 'b4' \(batch 4\) does not run on the lite runtime: needs "
        r"libtorch: aoti_torch_cpu_grid_sampler_2d .*; it is left out of the aarch64 package",
    ):
        assert runnable_cross_models(_manifest(models=(b1, b4))) == {"b1"}
    with pytest.raises(
        BuildError,
        match=r"cpu_target 'aarch64': no model of Walk runs on the aarch64 lite runtime, "
        r"the only runtime there: model 'b4' \(batch 4\) .*grid_sampler_2d",
    ):
        runnable_cross_models(_manifest(models=(b4,)))
