"""Build tunings: the "latency" build (inductor's C++ GEMM template, recurrent layers
decomposed) through the API, the CLI and config files, its parity, cache key and errors; the
decomposed model "auto" adds for a recurrent policy's small batches.

AOTInductor compiles: the tutorial policy (through a config file), an LSTM policy with
tuning "latency" and with "auto" (three models).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
import torch
from conftest import ROOT, assert_swapped_and_rolled_back_twice
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

sys.path.insert(0, str(ROOT / "benchmarks"))  # for `policies` (the benchmark's LSTM policy)

import tdaot
import tdaot.builder.cache
import tdaot.builder.tuning
from tdaot import _torch_compat, _torch_compat_gemm
from tdaot.builder.cache import artifact_key
from tdaot.builder.config import load_config
from tdaot.builder.export import export_policy
from tdaot.builder.rewrites import wide_product_weights
from tdaot.builder.tuning import (
    DECOMPOSED_RNN_MAX_BATCH,
    RECURRENT_OPS,
    TUNINGS,
    plan_key_parts,
    plan_models,
    rewrites_made,
    tune_plan,
    tune_program,
)
from tdaot.cli import main
from tdaot.errors import BuildError, ConfigError
from tdaot.manifest import Manifest, Source

POLICIES = ROOT / "examples" / "policies.py"


def _kernel_source(package: str | Path) -> str:
    """The generated C++ kernels AOTInductor keeps in the package."""
    with zipfile.ZipFile(package) as archive:
        return "".join(
            archive.read(name).decode() for name in archive.namelist() if name.endswith(".kernel.cpp")
        )


def _recurrent_ops(program: torch.export.ExportedProgram) -> set[str]:
    names = {f"aten.{name}" for name in RECURRENT_OPS}
    return {str(n.target) for n in program.graph.nodes if n.op == "call_function"} & names


@pytest.fixture(scope="module")
def latency_project(tmp_path_factory):
    """The tutorial policy built with tuning = "latency" from a config file, with the cache,
    while inductor's candidate timing is made to fail: the latency build must choose its
    GEMM kernels without benchmarking them (reproducible on a busy machine)."""
    from torch._inductor.select_algorithm import AlgorithmSelectorCache

    root = tmp_path_factory.mktemp("latency")
    config = root / "tdaot.toml"
    config.write_text(
        textwrap.dedent(
            f"""
            [defaults]
            tuning = "latency"

            [[artifact]]
            name = "tutorial"
            factory = "{POLICIES}:tutorial_policy"
            batch = [1, 64]
            """
        )
    )
    argv = ["build", "--config", str(config), "--cache-dir", str(root / "cache")]

    def timed_candidates(*args, **kwargs):
        raise AssertionError("the latency build timed GEMM candidates")

    with pytest.MonkeyPatch.context() as patch:
        for method in ("autotune", "do_autotuning", "benchmark_choices"):
            patch.setattr(AlgorithmSelectorCache, method, timed_candidates)
        code = main([*argv, "--report", str(root / "first.json")])
    return {"root": root, "argv": argv, "code": code, "package": root / "dist" / "tutorial.pt2"}


def _result(path: Path) -> dict:
    (result,) = json.loads(path.read_text())["results"]
    return result


def test_latency_build_from_config_passes_the_parity_gate(latency_project):
    result = _result(latency_project["root"] / "first.json")
    assert latency_project["code"] == 0, result["error"]
    assert result["status"] == "built"
    assert result["parity"] and all(row["max_abs"] <= 1e-5 for row in result["parity"])


def test_latency_package_uses_the_cpp_gemm_template_and_is_sealed(latency_project):
    package = latency_project["package"]
    source = _kernel_source(package)
    assert "micro_gemm" in source  # inductor's C++ GEMM template, not ATen's addmm
    # Its fp32 micro-kernels with their accumulators in registers (tdaot._torch_compat_gemm):
    # a torch that renders the body otherwise leaves it as it was, and this says so.
    assert _torch_compat_gemm.REGISTER_BODY in source and _torch_compat_gemm.LAMBDA_BODY not in source, (
        f"torch {torch.__version__} renders inductor's fp32 micro-kernel otherwise: "
        "tdaot._torch_compat.float_micro_kernels_in_registers replaced nothing"
    )
    assert len(tdaot.verify_package(package)) == 64  # every file against its digest in the manifest
    from examples.policies import tutorial_policy

    policy, example = tutorial_policy()
    tdaot.testing.assert_parity(policy, str(package), example, batch_sizes=[1, 3, 64])


def test_latency_build_is_cached_under_its_own_key(latency_project):
    root = latency_project["root"]
    assert main([*latency_project["argv"], "--no-parity", "--report", str(root / "again.json")]) == 0
    again, first = _result(root / "again.json"), _result(root / "first.json")
    assert again["status"] == "cached" and again["sha256"] == first["sha256"]


def test_tuning_and_its_rewrite_change_the_cache_key(monkeypatch):
    from examples.policies import tutorial_policy

    from policies import lstm_policy

    for make in (tutorial_policy, lstm_policy):
        policy, example = make()
        exported = export_policy(policy, example)
        manifest = Manifest(
            inputs=exported.inputs, outputs=exported.outputs, batch=exported.batch,
            interaction_type="deterministic", device="cpu", cpu_target="native", cpu_isa="",
            torch_version="", tensordict_version="", tdaot_version="", source=Source("Policy"),
        )  # fmt: skip
        keys = {tuning: artifact_key(exported.program, manifest, tuning=tuning) for tuning in TUNINGS}
        # Keys are per model: "auto"'s first model is a throughput one that multiplies by
        # reciprocals (ModelPlan.reciprocals), "throughput"'s is inductor's own: three keys.
        assert len(set(keys.values())) == 3
        assert keys["auto"] == artifact_key(exported.program, manifest)  # the default
    # The LSTM's rewrite is in the key (the ops it decomposes), so changing what the
    # latency tuning decomposes is a different key even with the same inductor options.
    before = artifact_key(exported.program, manifest, tuning="latency")
    monkeypatch.setattr(tdaot.builder.tuning, "RECURRENT_OPS", RECURRENT_OPS[:1])
    assert artifact_key(exported.program, manifest, tuning="latency") != before


def test_latency_lstm_is_decomposed_and_matches_eager(tmp_path):
    from policies import lstm_policy

    policy, example = lstm_policy()
    artifact = tdaot.build(policy, example, tmp_path / "lstm.pt2", tuning="latency", save_exported=True)
    # What went into the compiler (saved beside it) holds no fused RNN op any more.
    assert _recurrent_ops(torch.export.load(artifact.exported_path)) == set()
    assert "micro_gemm" in _kernel_source(artifact.path)
    tdaot.testing.assert_parity(policy, artifact, example, batch_sizes=[1, 5, 64])
    native = tdaot.load(artifact.path)
    assert native.sha256 == artifact.sha256


def test_auto_lstm_serves_few_rows_from_a_decomposed_model_and_matches_eager(tmp_path, monkeypatch):
    """tuning "auto" on a dynamic recurrent policy: beside the fused-op model for every batch and
    the batch-1 model, a dynamic model for batches up to DECOMPOSED_RNN_MAX_BATCH that calls no
    fused RNN op; each batch below runs on the model it should and matches eager. (AVX2 kernels
    decompose at every batch: the limit per ISA is lifted here so that every host builds this.)"""
    from policies import lstm_policy

    monkeypatch.setattr(tdaot.builder.tuning, "DECOMPOSED_RNN_MAX_BATCH_BY_ISA", {})
    policy, example = lstm_policy()
    artifact = tdaot.build(policy, example, tmp_path / "lstm.pt2")
    models = {m.name: m for m in artifact.manifest.models}
    assert list(models) == ["model", "small", "b1"]
    top = DECOMPOSED_RNN_MAX_BATCH
    assert (models["small"].batch.min, models["small"].batch.max) == (1, top)
    fused = "aoti_torch_cpu_mkldnn_rnn_layer"
    assert fused in models["model"].lite.needs and fused not in models["small"].lite.needs
    native = tdaot.load(artifact.path)
    assert [native.bind(b).model for b in (1, 2, top, top + 1)] == ["b1", "small", "small", "model"]
    tdaot.testing.assert_parity(policy, native, example, batch_sizes=[1, 5, top, top + 1])


def test_gru_and_rnn_layers_are_decomposed_too():
    from tensordict import TensorDict
    from tensordict.nn import TensorDictModule
    from torch import nn

    class Recurrent(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gru = nn.GRU(6, 16, num_layers=2, batch_first=True)
            self.rnn = nn.RNN(16, 8, batch_first=True)

        def forward(self, x, h):
            out, h = self.gru(x.unsqueeze(1), h.transpose(0, 1).contiguous())
            out, _ = self.rnn(out)
            return out.squeeze(1), h.transpose(0, 1)

    torch.manual_seed(0)
    policy = TensorDictModule(Recurrent(), in_keys=["x", "h"], out_keys=["y", ("next", "h")])
    example = TensorDict({"x": torch.randn(4, 6), "h": torch.randn(4, 2, 16)}, batch_size=[4])
    program = export_policy(policy, example).program
    assert _recurrent_ops(program) == {"aten.gru.input", "aten.rnn_tanh.input"}
    tuned = tune_program(program, "latency")
    assert _recurrent_ops(tuned) == set()
    assert tune_program(program, "throughput") is program
    for batch in (1, 3):
        x, h = torch.randn(batch, 6), torch.randn(batch, 2, 16)
        for got, want in zip(tuned.module()(x, h), program.module()(x, h)):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_latency_compile_setup_works_in_a_fresh_process():
    # The fixture's process imported inductor first; a `tdaot build --tuning latency` has not.
    code = (
        "import tdaot.builder.tuning as t\n"
        "from tdaot.builder import patches\n"
        "with t.compiling_with(t.ModelPlan('model', 'latency'), [p.name for p in patches.PATCHES]):\n"
        "    from torch._inductor.select_algorithm import get_algorithm_selector_cache as c\n"
        "    inside = len(c().preprocessing_fns)\n"
        "assert len(c().preprocessing_fns) == inside - 1\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


@pytest.mark.parametrize("bad", ["fast", "Latency", None, 1])
def test_bad_tuning_is_a_build_error_naming_it(bad, tmp_path):
    from examples.policies import tutorial_policy

    policy, example = tutorial_policy()
    with pytest.raises(BuildError, match=rf"tuning={bad!r} is not one of 'throughput', 'latency'"):
        tdaot.build(policy, example, tmp_path / "x.pt2", tuning=bad)


def test_latency_is_refused_for_cuda(tmp_path):
    from examples.policies import tutorial_policy

    policy, example = tutorial_policy()
    with pytest.raises(BuildError, match=r"tuning='latency' is for CPU packages \(device is 'cuda'\)"):
        tdaot.build(policy, example, tmp_path / "x.pt2", device="cuda", tuning="latency")


def test_cli_takes_the_tuning_and_refuses_others(monkeypatch, capsys):
    seen = {}

    def fake_build(module, example, output, **options):
        seen.update(options)
        raise BuildError("stop here")

    monkeypatch.setattr("tdaot.cli.build", fake_build)
    argv = ["build", f"{POLICIES}:tutorial_policy", "-o", "/tmp/never-written.pt2"]
    assert main(argv) == 1 and seen["tuning"] == "auto"  # the default
    assert main([*argv, "--tuning", "latency"]) == 1 and seen["tuning"] == "latency"
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--tuning", "fast"])
    assert exit_info.value.code == 2
    assert "--tuning: invalid choice: 'fast'" in capsys.readouterr().err


A = "[[artifact]]\nname = 'a'\nfactory = 'f.py:f'\n"


def test_config_tuning_default_entry_and_errors(tmp_path, capsys):
    config = tmp_path / "tdaot.toml"
    config.write_text(A + "[[artifact]]\nname = 'b'\nfactory = 'f.py:f'\ntuning = 'latency'\n")
    assert [spec.tuning for spec in load_config(config)] == ["auto", "latency"]  # auto: the default
    config.write_text("[defaults]\ntuning = 'latency'\n" + A)
    assert [spec.tuning for spec in load_config(config)] == ["latency"]
    for body, message in (
        (A + "tuning = 'fast'\n", r"artifact #1 \('a'\): field 'tuning': 'fast' is not one of throughput"),
        ("[defaults]\ntuning = 1\n" + A, r"field 'tuning': 1 is not one of"),
        (A + "tuning = 'latency'\ndevice = 'cuda'\n", r"field 'tuning': 'latency' is for CPU packages"),
    ):
        config.write_text(body)
        with pytest.raises(ConfigError, match=message):
            load_config(config)
        assert main(["build", "--config", str(config)]) == 2
        assert "field 'tuning'" in capsys.readouterr().err
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        "[tool.tdaot]\n[[tool.tdaot.artifact]]\nname = 'a'\nfactory = 'p.py:f'\ntuning = 'latency'\n"
    )
    assert [spec.tuning for spec in load_config(pyproject)] == ["latency"]


class _Heads(torch.nn.Module):
    """Linear layers of 12 and 6 (no bias) out-features, padded to 16; of 4 and 16, kept; the
    12-wide one on a sequence too."""

    def __init__(self) -> None:
        super().__init__()
        self.narrow, self.no_bias = torch.nn.Linear(32, 12), torch.nn.Linear(32, 6, bias=False)
        self.tiny, self.full = torch.nn.Linear(32, 4), torch.nn.Linear(32, 16)

    def forward(self, x, sequence):
        return self.narrow(x), self.no_bias(x), self.tiny(x), self.full(x), self.narrow(sequence)


def _linear_widths(program) -> list[int]:
    linear = torch.ops.aten.linear.default
    return [n.args[1].meta["val"].shape[0] for n in program.graph.nodes if n.target is linear]


def test_avx2_throughput_models_compute_narrow_linear_layers_16_wide():
    plans = plan_models("auto", (1, 64), "cpu", 1, 4096, vector_isa="avx2")
    assert {p.name: p.padded_products for p in plans} == {"model": True, "b1": False, "b64": True}
    for plan in plans:
        named = plan_key_parts(plan).get("rewrites", [])
        assert ("narrow_products_padded" in named) == plan.padded_products
    # Measured on MKL's AVX2 path only: other kernels and explicit tunings keep inductor's.
    assert not any(
        p.padded_products for p in plan_models("auto", (1, 64), "cpu", 1, 4096, vector_isa="avx512")
    )
    assert not plan_models("throughput", None, "cpu", 1, 4096, vector_isa="avx2")[0].padded_products

    x, sequence = torch.randn(64, 32), torch.randn(8, 5, 32)
    program = torch.export.export(_Heads(), (x, sequence))
    padded = tune_plan(program, plans[0])
    assert _linear_widths(program) == [12, 6, 4, 16, 12]
    assert _linear_widths(padded) == [16, 16, 4, 16, 16]
    assert _linear_widths(tune_plan(program, plans[1])) == [12, 6, 4, 16, 12]  # b1: latency, kept
    for want, got in zip(program.module()(x, sequence), padded.module()(x, sequence)):
        assert got.shape == want.shape and got.is_contiguous()
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_a_padded_model_matches_eager_and_swaps_its_weights(tmp_path):
    """End to end: the dynamic model of a 12-action head (padded where the kernels are AVX2)
    matches eager at 64 rows, and a retrained policy's weights swap in."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ELU(), torch.nn.Linear(32, 12))
    policy = TensorDictModule(net, in_keys=["observation"], out_keys=["action"])
    example = TensorDict({"observation": torch.randn(4, 8)}, batch_size=[4])
    artifact = tdaot.build(policy, example, tmp_path / "head.pt2", specialize=())
    isa = artifact.manifest.cpu_isa
    kernels = _kernel_source(artifact.path)
    assert ("constant_pad_nd" in kernels) == (isa == "avx2"), isa
    observation = torch.randn(64, 8)
    native = tdaot.load(artifact.path)
    with torch.no_grad():
        want = net(observation)
    torch.testing.assert_close(native(observation=observation)["action"], want, rtol=1e-5, atol=1e-6)

    retrained = copy.deepcopy(policy)
    with torch.no_grad():
        for parameter in retrained.parameters():
            parameter.mul_(-0.5)
    tdaot.export_weights(retrained, base=artifact.path, out=tmp_path / "head-v2.tdw")
    native.swap_weights(tmp_path / "head-v2.tdw")
    with torch.no_grad():
        want = retrained.module(observation)
    torch.testing.assert_close(native(observation=observation)["action"], want, rtol=1e-5, atol=1e-6)


class _Wide(torch.nn.Module):
    """A 1024 x 1024 layer (oneDNN's), a 96 -> 1024 one and a 24-wide head (MKL's), and the wide
    layer on a sequence (a 3-D input: MKL's)."""

    def __init__(self) -> None:
        super().__init__()
        self.inner, self.wide, self.head = (
            torch.nn.Linear(96, 1024),
            torch.nn.Linear(1024, 1024),
            torch.nn.Linear(1024, 24),
        )

    def forward(self, x, sequence):
        hidden = self.wide(torch.nn.functional.silu(self.inner(x)))
        return self.head(hidden), self.wide(sequence)


def test_avx512_dynamic_throughput_models_put_wide_linear_layers_on_onednn():
    """Issue 54: oneDNN's matmul for a linear layer of 2 MiB of weights or more, in dynamic
    throughput models with AVX-512 kernels only (a static model keeps ATen's for the lite
    runtime; MKL's AVX2 path measured as fast)."""
    plans = plan_models("auto", (1, 64), "cpu", 1, 4096, vector_isa="avx512")
    assert {p.name: p.onednn_products for p in plans} == {"model": True, "b1": False, "b64": False}
    for isa in ("avx512 avx512_vnni", "avx512 avx512_vnni amx_tile"):  # inductor's names of its subclasses
        assert plan_models("auto", None, "cpu", 1, 4096, vector_isa=isa)[0].onednn_products
    for plan in plans:
        named = plan_key_parts(plan).get("rewrites", [])
        assert ("wide_products_onednn" in named) == plan.onednn_products
    assert not any(p.onednn_products for p in plan_models("auto", (1, 64), "cpu", 1, 4096, vector_isa="avx2"))
    assert not plan_models("throughput", None, "cpu", 1, 4096, vector_isa="avx512")[0].onednn_products
    exact = plan_models("auto", None, "cpu", 1, 4096, vector_isa="avx512", exact_math=True)[0]
    assert (
        rewrites_made(torch.export.export(_Wide(), (torch.randn(4, 96), torch.randn(2, 3, 1024))), exact)
        == []
    )

    x, sequence = torch.randn(64, 96), torch.randn(2, 3, 1024)
    program = torch.export.export(_Wide(), (x, sequence))
    tuned = tune_plan(program, plans[0])
    onednn = torch.ops.mkldnn._linear_pointwise.default
    linear = torch.ops.aten.linear.default
    assert [n.args[1].meta["val"].shape[1] for n in tuned.graph.nodes if n.target is onednn] == [1024]
    assert [n.args[1].meta["val"].shape[0] for n in tuned.graph.nodes if n.target is linear] == [
        1024,
        24,
        1024,
    ]
    assert rewrites_made(program, plans[0]) == ["wide_products_onednn"]
    for want, got in zip(program.module()(x, sequence), tuned.module()(x, sequence)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not _torch_compat.has_onednn_linear(), reason="a torch without oneDNN's linear op")
def test_the_weights_handed_to_onednn_are_named_for_the_runtime_to_pack():
    """ModelSpec.packed_weights: each constant whose every use is a wide layer on oneDNN (the
    runtime replaces it by its packed copy), not one that is also read another way."""

    class Net(torch.nn.Module):
        def __init__(self, tied: bool = False) -> None:
            super().__init__()
            self.inner, self.wide, self.head = (
                torch.nn.Linear(16, 1024),
                torch.nn.Linear(1024, 512),
                torch.nn.Linear(512, 8),
            )
            self.tied = tied

        def forward(self, x):
            y = self.head(self.wide(torch.relu(self.inner(x))))
            return y + self.wide.weight.sum() if self.tied else y

    example = (torch.randn(4, 16),)
    assert wide_product_weights(torch.export.export(Net(), example)) == ("wide.weight",)
    assert wide_product_weights(torch.export.export(Net(tied=True), example)) == ()
    # _Wide's 1024 x 1024 layer also runs on a 3-D input, which stays ATen's: not packed.
    assert (
        wide_product_weights(torch.export.export(_Wide(), (torch.randn(4, 96), torch.randn(2, 3, 1024))))
        == ()
    )
    plans = plan_models("auto", (1,), "cpu", 1, 4096, vector_isa="avx512")
    program = torch.export.export(Net(), example)
    assert [bool(rewrites_made(program, plan)) for plan in plans] == [True, False]


@pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() != "AVX512", reason="AVX-512 kernels only")
def test_a_wide_layer_runs_on_onednn_packed_at_load_and_after_a_swap(tmp_path):
    """The dynamic model hands its wide layer to oneDNN; the runtime packs that weight at load
    and again for a swap: outputs match eager before, after the swap and after its rollback."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 1024), torch.nn.SiLU(), torch.nn.Linear(1024, 512))
    policy = TensorDictModule(net, in_keys=["observation"], out_keys=["action"])
    example = TensorDict({"observation": torch.randn(4, 16)}, batch_size=[4])
    artifact = tdaot.build(policy, example, tmp_path / "wide.pt2", specialize=())
    assert artifact.manifest.numerics == ("wide_products_onednn",)
    (model,) = artifact.manifest.models
    # The second linear layer's weight, by its name in the exported program.
    assert [name.split(".")[-2:] for name in model.packed_weights] == [["2", "weight"]], model.packed_weights
    native = tdaot.load(tmp_path / "wide.pt2")
    assert native.manifest.models[0].packed_weights == model.packed_weights
    assert "; 1 weight(s) packed for oneDNN at load" in native.manifest.describe()
    x = torch.randn(64, 16)
    with torch.no_grad():
        original = net(x)
    torch.testing.assert_close(native.run_positional(x)[0], original)
    assert_swapped_and_rolled_back_twice(native, policy, artifact.path, tmp_path / "wide-v2.tdw", x, original)
