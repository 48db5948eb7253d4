"""tdaot.builder.patches: every patch of torch's internals is checked against the installed torch,
and a torch that differs gets a package built without it, a CompatWarning naming the patch and the
torch version, and a manifest listing only the patches in force; exact_math builds with none of
the changes to results (NUMERICS). Three compiles: one with every patch refused, the default and
exact_math builds of one policy."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
import warnings
import zipfile
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

import tdaot
from tdaot.builder import gemm_choice, patches, targets
from tdaot.builder.cache import artifact_key
from tdaot.builder.export import export_policy
from tdaot.builder.tuning import ModelPlan
from tdaot.manifest import Manifest, Source

ALL = tuple(p.name for p in patches.PATCHES)
# The patches of a model built for this host's architecture (the cross target's two aside) with
# AVX2 kernels, as this file's builds are (x86-64-v3): any of another ISA's own aside.
NATIVE = tuple(
    p.name for p in patches.PATCHES if p.where != patches.CROSS and (not p.isas or "avx2" in p.isas)
)
# Patches whose checks read the same thing of torch: a torch without it refuses them together.
SHARED_CHECKS = (
    {"float_gemm_register_block", "one_row_gemm_blocks"},
    {"vector_isas_limited_to", "vector_isa_set_to"},
    {"compile_commands_run_by", "compiles_with_include_first"},
)


def _other_signature(monkeypatch, owner, name: str, static: bool = False) -> None:
    """``owner.name`` as another torch might have it: the same behaviour, another signature."""
    original = getattr(owner, name)

    def changed(*args, changed_in_another_torch=None, **kwargs):
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, staticmethod(changed) if static else changed)


def _micro_kernel_text_changed(monkeypatch) -> None:
    from torch._inductor.codegen import cpp_micro_gemm

    cls = cpp_micro_gemm.CppMicroGemmFP32Vec
    # Valid C++ all the same: inductor still compiles it.
    changed = cls.TEMPLATE_KERNEL.replace("Vectorized va;", "Vectorized  va;")
    monkeypatch.setattr(cls, "TEMPLATE_KERNEL", changed)


def _break(name: str, monkeypatch) -> str:
    """Makes the installed torch differ from what the patch ``name`` expects; returns the name the
    refusal must give (the attribute, or what the text check says)."""
    from torch._inductor import cpp_builder, cpu_vec_isa, select_algorithm
    from torch._inductor.codegen import common, cpp, cpp_micro_gemm, cpp_template_kernel
    from torch._inductor.fx_passes import post_grad

    if name == "vector_isas_limited_to":
        monkeypatch.delattr(cpu_vec_isa, "valid_vec_isa_list")
        return "valid_vec_isa_list"
    if name == "vector_isa_set_to":
        monkeypatch.delattr(cpu_vec_isa, "VecNEON")
        return "VecNEON"
    if name == "wrapper_chosen":
        monkeypatch.delattr(common, "device_codegens")
        return "device_codegens"
    if name == "inductor_cache_at":
        from torch._inductor.runtime import cache_dir_utils

        monkeypatch.delattr(cache_dir_utils, "temporary_cache_dir")
        return "temporary_cache_dir"
    if name == "torch_at":
        monkeypatch.delattr(cpp_builder, "_LINKER_SCRIPT")
        return "_LINKER_SCRIPT"
    if name in ("compile_commands_run_by", "compiles_with_include_first"):
        _other_signature(monkeypatch, cpp_builder, "_run_compile_cmd")
        return "_run_compile_cmd"
    if name == "byte_loads_direct":
        _other_signature(monkeypatch, cpp.CppVecKernel, "_get_vec_load_line")
        return "_get_vec_load_line"
    if name == "channels_interleaved":
        _other_signature(monkeypatch, cpp.KernelGroup, "codegen_group")
        return "codegen_group"
    if name == "short_loops_scalar":
        _other_signature(monkeypatch, cpp.TilingSelect, "select_tiling")
        return "select_tiling"
    if name == "tanh_within_3_5_ulp":
        _other_signature(monkeypatch, cpp.CppVecOverrides, "tanh", static=True)
        return "CppVecOverrides.tanh"
    if name == "gemm_choices_filtered":
        monkeypatch.delattr(select_algorithm, "get_algorithm_selector_cache")
        return "get_algorithm_selector_cache"
    if name == "float_gemm_register_block":
        monkeypatch.delattr(cpp_micro_gemm, "micro_gemm_configs")
        return "micro_gemm_configs"
    if name == "one_row_gemm_blocks":
        _other_signature(monkeypatch, cpp_micro_gemm, "generate_gemm_config")
        return "generate_gemm_config"
    if name == "float_micro_kernels_in_registers":
        _micro_kernel_text_changed(monkeypatch)
        return "no longer renders the body the patch replaces"
    if name == "gemm_accumulator_on_stack":
        _other_signature(monkeypatch, cpp_template_kernel.CppTemplateKernel, "define_buffer")
        return "define_buffer"
    if name == "output_clones_kept":
        _other_signature(monkeypatch, post_grad, "remove_noop_ops")
        return "remove_noop_ops"
    raise AssertionError(f"no simulation of a torch without what {name!r} needs: add one")


def _avx2_manifest(device: str = "cpu", isa: str = "avx2") -> Manifest:
    return Manifest(
        inputs=(), outputs=(), batch=tdaot.manifest.BatchRange(1, 1), interaction_type="deterministic",
        device=device, cpu_target="x86-64-v3", cpu_isa=isa, torch_version=torch.__version__,
        tensordict_version="0.14.3", tdaot_version="0.2.0", source=Source("Policy"),
    )  # fmt: skip


BOUND_PLAN = ModelPlan("model", "latency", 1, bound=True)


def test_the_table_names_each_patch_once_and_this_torch_takes_every_one():
    assert len(set(ALL)) == len(ALL)
    assert {p.where for p in patches.PATCHES} <= {
        patches.EVERY, patches.NATIVE, patches.CROSS, patches.LATENCY, patches.BOUND
    }  # fmt: skip
    assert {p.numerics for p in patches.PATCHES if p.numerics} <= set(patches.NUMERICS)
    assert patches.lacking(ALL) == {}, f"torch {torch.__version__} differs from what these patches need"
    # A bound AVX2 model is concerned by all but the cross target's; exact_math drops the one
    # changing results.
    assert patches.in_force(BOUND_PLAN, _avx2_manifest()) == NATIVE
    exact = dataclasses.replace(BOUND_PLAN, exact_math=True)
    assert patches.in_force(exact, _avx2_manifest()) == tuple(n for n in NATIVE if n != "tanh_within_3_5_ulp")
    # An aarch64 model takes the cross target's two, none of the x86 kernel patches.
    arm = dataclasses.replace(_avx2_manifest(isa="neon"), cpu_target="aarch64")
    cross = patches.in_force(BOUND_PLAN, arm)
    assert {"vector_isa_set_to", "compiles_with_include_first"} <= set(cross)
    assert not {"vector_isas_limited_to", "byte_loads_direct", "tanh_within_3_5_ulp"} & set(cross)
    assert "channels_interleaved" not in cross
    every = (
        "vector_isas_limited_to",
        "wrapper_chosen",
        "inductor_cache_at",
        "torch_at",
        "compile_commands_run_by",
    )
    # AVX-512 kernels, under any of inductor's names for them, take their own one.
    for isa in ("avx512", "avx512 avx512_vnni", "avx512 avx512_vnni amx_tile"):
        avx512 = patches.in_force(ModelPlan("model", "throughput"), _avx2_manifest(isa=isa))
        assert avx512 == (*every, "channels_interleaved"), isa
    cuda = _avx2_manifest(device="cuda", isa="")
    assert patches.in_force(ModelPlan("model", "throughput"), cuda) == every


@pytest.mark.parametrize("name", ALL)
def test_a_patch_torch_does_not_take_is_left_out_with_a_warning_naming_it(name, monkeypatch):
    expected = _break(name, monkeypatch)
    refused = patches.lacking(ALL)
    # Only the patches that need what changed (the two GEMM-table patches share their check).
    assert name in refused and expected in refused[name], refused
    together = set().union(*(group for group in SHARED_CHECKS if name in group)) | {name}
    assert set(refused) <= together, refused
    assert name not in patches.in_force(BOUND_PLAN, _avx2_manifest())
    assert name not in patches.in_force(
        BOUND_PLAN, dataclasses.replace(_avx2_manifest(), cpu_target="aarch64")
    )
    with pytest.warns(tdaot.CompatWarning) as caught:
        patches.warn_lacking([name, name])  # once, however often it is named
    messages = [str(w.message) for w in caught if issubclass(w.category, tdaot.CompatWarning)]
    assert len(messages) == 1, messages
    message = messages[0]
    assert f"patch {name!r}" in message and f"torch {torch.__version__}" in message and expected in message
    assert patches.patch(name).without in message


def test_patches_not_in_force_leave_torch_alone(monkeypatch):
    """With none in force, the contexts reach for nothing a torch may lack."""
    for name in ALL:
        _break(name, monkeypatch)
    with targets.compiling_for(targets.CPU_TARGETS["native"], ()), gemm_choice.template_chosen(True, ()):
        pass


def test_a_pinned_target_without_the_isa_limit_is_refused_where_inductor_picks_beyond_it(monkeypatch):
    # x86-64-v3 pins 256-bit vectors: inductor picks AVX2 without the limit too.
    assert targets.vector_isa(targets.CPU_TARGETS["x86-64-v3"], limited=False) == "avx2"
    monkeypatch.setattr(tdaot._torch_compat, "picked_vector_isa_class", lambda: "VecAMX")
    with pytest.raises(tdaot.BuildError) as err:
        targets.vector_isa(targets.CPU_TARGETS["x86-64-v4"], limited=False)
    message = str(err.value)
    assert "'vector_isas_limited_to'" in message and f"torch {torch.__version__}" in message
    assert "VecAMX" in message and "x86-64-v4" in message


def test_the_code_digest_is_the_same_in_another_process_and_follows_the_source(tmp_path, monkeypatch):
    script = "from tdaot.builder import patches; print(patches.code_digest())"
    other = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert other.stdout.strip() == patches.code_digest()
    module = tmp_path / "tdaot_digest_probe.py"
    module.write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(patches, "CODE_MODULES", (*patches.CODE_MODULES, "tdaot_digest_probe"))
    patches.code_digest.cache_clear()
    try:
        before = patches.code_digest()
        module.write_text("X = 2\n")
        patches.code_digest.cache_clear()
        assert patches.code_digest() != before
    finally:
        patches.code_digest.cache_clear()


def _policy():
    """An MLP with a division by a constant and a tanh: both changes to results apply to it."""
    torch.manual_seed(0)

    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layers = (nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 3))
            self.body = nn.Sequential(*layers)

        def forward(self, x):
            return self.body(x / 7.0)

    policy = TensorDictModule(Scaled(), in_keys=["observation"], out_keys=["action"])
    return policy, TensorDict({"observation": 3 * torch.randn(1, 6)}, batch_size=[1])


OPTIONS = {"batch": "static", "tuning": "latency", "cpu_target": "x86-64-v3"}


def _kernel_source(package: str | Path) -> str:
    with zipfile.ZipFile(package) as archive:
        return "".join(archive.read(n).decode() for n in archive.namelist() if n.endswith(".cpp"))


def test_the_key_holds_exact_math_and_the_patches_in_force(monkeypatch):
    policy, example = _policy()
    exported = export_policy(policy, example, tdaot.BuildOptions(batch="static"))
    manifest = _avx2_manifest()
    plan = BOUND_PLAN
    key = artifact_key(exported.program, manifest, plan=plan)
    assert artifact_key(exported.program, manifest, plan=dataclasses.replace(plan, exact_math=True)) != key
    _break("short_loops_scalar", monkeypatch)
    assert artifact_key(exported.program, manifest, plan=plan) != key
    # A patch that does not concern a model leaves its key alone.
    avx512 = dataclasses.replace(manifest, cpu_isa="avx512")
    monkeypatch.undo()
    key512 = artifact_key(exported.program, avx512, plan=plan)
    _break("short_loops_scalar", monkeypatch)
    assert artifact_key(exported.program, avx512, plan=plan) == key512
    # tdaot's source is in the cache key, not in the build folder's (the package's bytes).
    monkeypatch.setattr(patches, "code_digest", lambda: "another tdaot")
    assert artifact_key(exported.program, avx512, plan=plan) != key512
    folder = artifact_key(exported.program, avx512, plan=plan, with_code=False)
    monkeypatch.undo()
    _break("short_loops_scalar", monkeypatch)
    assert artifact_key(exported.program, avx512, plan=plan, with_code=False) == folder


def test_every_patch_refused_still_builds_with_parity_and_says_so(tmp_path, monkeypatch):
    """One compile for all of them: torch changed where inductor still works without the patch
    (another signature, another micro-kernel text); elsewhere (a module attribute inductor itself
    needs) the table's check reports the difference."""
    real = {"compile_commands_run_by", "byte_loads_direct", "short_loops_scalar", "tanh_within_3_5_ulp",
            "one_row_gemm_blocks", "float_micro_kernels_in_registers", "gemm_accumulator_on_stack",
            "output_clones_kept"}  # fmt: skip
    for name in real:
        _break(name, monkeypatch)
    table = tuple(
        p if p.name in real else dataclasses.replace(p, lacks=lambda: "simulated: torch differs")
        for p in patches.PATCHES
    )
    monkeypatch.setattr(patches, "PATCHES", table)
    policy, example = _policy()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        artifact = tdaot.build(policy, example, tmp_path / "p.pt2", cache=False, **OPTIONS)
    refused = [str(w.message) for w in caught if issubclass(w.category, tdaot.CompatWarning)]
    assert sorted(refused) == sorted(set(refused)) and len(refused) == len(NATIVE), refused
    for name in NATIVE:
        assert any(f"patch {name!r}" in m and torch.__version__ in m for m in refused), name
    assert artifact.manifest.patches == ()
    assert artifact.manifest.numerics == ("divisions_as_multiplications",)  # a rewrite, not a patch
    assert "Sleef_tanhf8_u35" not in _kernel_source(artifact.path)
    tdaot.testing.assert_parity(policy, artifact, example)


@pytest.fixture(scope="module")
def default_and_exact(tmp_path_factory):
    folder = tmp_path_factory.mktemp("exact")
    policy, example = _policy()
    built = {
        exact: tdaot.build(policy, example, folder / f"{exact}.pt2", cache=False, exact_math=exact, **OPTIONS)
        for exact in (False, True)
    }
    return policy, example, built


def test_the_manifest_lists_the_patches_and_numerics_and_exact_math_drops_them(default_and_exact, capsys):
    policy, example, built = default_and_exact
    default, exact = built[False], built[True]
    assert default.manifest.patches == NATIVE
    assert default.manifest.numerics == ("tanh_within_3_5_ulp", "divisions_as_multiplications")
    assert "Sleef_tanhf8_u35" in _kernel_source(default.path)
    assert exact.manifest.patches == tuple(n for n in NATIVE if n != "tanh_within_3_5_ulp")
    assert exact.manifest.numerics == ()
    assert "Sleef_tanhf8_u35" not in _kernel_source(exact.path)
    for artifact in (default, exact):
        tdaot.testing.assert_parity(policy, artifact, example)
    from tdaot.cli import main

    assert main(["inspect", str(exact.path)]) == 0
    shown = capsys.readouterr().out
    assert "numerics          none: torch's own results" in shown
    assert main(["inspect", str(default.path)]) == 0
    shown = capsys.readouterr().out
    assert "numerics          tanh_within_3_5_ulp, divisions_as_multiplications" in shown
    assert "torch patches     vector_isas_limited_to, wrapper_chosen, inductor_cache_at" in shown


def test_exact_math_is_an_option_of_every_front_end(tmp_path):
    from tdaot.builder.config import load_config

    assert tdaot.BuildOptions(exact_math=True).artifact_key()["exact_math"] is True
    with pytest.raises(tdaot.BuildError, match="exact_math='yes'"):
        tdaot.BuildOptions(exact_math="yes")
    config = tmp_path / "tdaot.toml"
    config.write_text(
        textwrap.dedent(
            """\
            [defaults]
            exact_math = true
            [[artifact]]
            name = "a"
            factory = "p.py:f"
            """
        )
    )
    (tmp_path / "p.py").write_text("def f():\n    pass\n")
    (spec,) = load_config(config)
    assert spec.options.exact_math is True
    help_text = subprocess.run(
        [sys.executable, "-m", "tdaot", "build", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "--exact-math" in help_text


def test_a_narrow_padded_product_is_listed_where_a_plan_pads_it():
    from tdaot.builder.compile import planned_manifest

    torch.manual_seed(0)
    policy = TensorDictModule(nn.Linear(8, 6), in_keys=["observation"], out_keys=["action"])
    example = TensorDict({"observation": torch.randn(4, 8)}, batch_size=[4])
    exported = export_policy(policy, example)
    manifest = dataclasses.replace(
        _avx2_manifest(), inputs=exported.inputs, outputs=exported.outputs, batch=exported.batch
    )
    padded = ModelPlan("model", "throughput", padded_products=True, reciprocals=True)
    planned = planned_manifest(manifest, [padded], exported.program)
    # No division in this program; an AVX2 model may take the tanh (the package lists it only
    # where its code does).
    assert planned.numerics == ("tanh_within_3_5_ulp", "narrow_products_padded")
    exact = planned_manifest(manifest, [dataclasses.replace(padded, exact_math=True)], exported.program)
    assert exact.numerics == ()


def test_a_patchs_change_to_results_is_listed_only_where_the_compiled_code_holds_it():
    planned = ("tanh_within_3_5_ulp", "divisions_as_multiplications")
    without = {"data/aotinductor/model/k.kernel.cpp": b"at::vec::tanh(x)", "a.so": b"Sleef_tanhf8_u35"}
    assert patches.numerics_in_code(planned, without) == ("divisions_as_multiplications",)
    within = {**without, "data/aotinductor/b1/k.kernel.cpp": b"Sleef_tanhf8_u35(x)"}
    assert patches.numerics_in_code(planned, within) == planned
