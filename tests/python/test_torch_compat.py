"""tdaot._torch_compat: each private torch API and each match on torch's error text that tdaot
relies on, checked against the installed torch. A failure here names the entry a torch upgrade
changed; fix it in tdaot/_torch_compat.py and nowhere else."""

from __future__ import annotations

import ast
import inspect
import os
import re
import sys
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict
from torch import nn

# Before any test reaches torch._inductor.codegen.cpp_micro_gemm: imported first, that module
# meets a circular import inside torch 2.13 (tdaot._torch_compat_gemm does the same).
from torch._inductor import select_algorithm  # noqa: F401

from tdaot import _torch_compat as compat

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "tdaot"


def _changed(entry: str, detail: str) -> str:
    return f"torch {torch.__version__} changed what tdaot._torch_compat.{entry} relies on: {detail}"


def test_distribution_validation_is_off_inside_and_restored():
    before = torch.distributions.Distribution._validate_args
    with compat.distribution_validation_off():
        assert torch.distributions.Distribution._validate_args is False, _changed(
            "distribution_validation_off", "Distribution._validate_args no longer holds the default"
        )
    assert torch.distributions.Distribution._validate_args == before


def test_operator_name_and_argument_names():
    assert compat.operator_name(torch.ops.aten.add.Tensor) == ("aten", "aten::add.Tensor"), _changed(
        "operator_name", "OpOverload._schema.name / _overloadname"
    )
    assert compat.operator_name(torch.ops.aten.relu.default) == ("aten", "aten::relu")
    assert compat.operator_name(len) is None
    assert compat.argument_names(torch.ops.aten.dropout.default) == ["input", "p", "train"], _changed(
        "argument_names", "OpOverload._schema.arguments"
    )


def test_python_registration_finds_a_python_kernel_and_not_a_cpp_one():
    @torch.library.custom_op("tdaot_compat_test::twice", mutates_args=())
    def twice(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    location = compat.python_registration("tdaot_compat_test::twice", "cpu")
    assert location and re.search(r"\.py:\d+$", location), _changed(
        "python_registration", f"torch._C._dispatch_dump's format (found {location!r})"
    )
    assert compat.python_registration("aten::add.Tensor", "cpu") is None


def test_decompose_rewrites_the_named_ops_only():
    class Lstm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(3, 4, batch_first=True)

        def forward(self, x):
            return self.lstm(x)[0]

    program = torch.export.export(Lstm(), (torch.randn(2, 1, 3),))
    decomposed = compat.decompose(program, ("lstm.input",))
    targets = {str(n.target) for n in decomposed.graph.nodes if n.op == "call_function"}
    assert "aten.lstm.input" not in targets, _changed("decompose", "torch._decomp.decomposition_table")
    assert compat.decompose(program, ("gru.input",)) is program


def test_vector_isa_limits_and_restores():
    from torch._inductor import cpu_vec_isa

    original = cpu_vec_isa.valid_vec_isa_list
    with compat.vector_isas_limited_to(()):
        assert compat.picked_vector_isa() == "", _changed(
            "vector_isas_limited_to", "cpu_vec_isa.pick_vec_isa no longer reads valid_vec_isa_list"
        )
    assert cpu_vec_isa.valid_vec_isa_list is original
    with compat.vector_isas_limited_to(None):
        assert isinstance(compat.picked_vector_isa(), str)


_POISON_THEN_PROBE = """
import sys
from torch._inductor import config, cpu_vec_isa
from tdaot import _torch_compat as compat
if sys.argv[1] == "poison":
    # What a bound model's compile did before: inductor probed AVX2 without libtorch linked.
    with config.patch({"aot_inductor.link_libtorch": False}):
        print("avx2" in [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()])
else:
    print("avx2" in [str(isa) for isa in compat.probed_vector_isas()])
"""


@pytest.mark.slow  # probes in a cold inductor cache
@pytest.mark.skipif("avx2" not in Path("/proc/cpuinfo").read_text(), reason="the host has no AVX2 to probe")
def test_vector_isas_are_probed_with_libtorch_and_a_poisoned_probe_is_redone(tmp_path):
    # A probe under link_libtorch=False used to drop AVX2 for the process and, through the
    # probe library left in inductor's cache, for every later one (CI: x86-64-v3 built scalar).
    import subprocess

    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}

    def probe(mode: str) -> str:
        run = subprocess.run(
            [sys.executable, "-c", _POISON_THEN_PROBE, mode], env=env, capture_output=True, text=True
        )
        assert run.returncode == 0, run.stderr[-2000:]
        return run.stdout.strip().splitlines()[-1]

    assert probe("poison") == "False", _changed(
        "probed_vector_isas", "inductor's ISA probe now succeeds without libtorch linked"
    )
    assert probe("probe") == "True", _changed(
        "probed_vector_isas", "the poisoned probe library was not found where VecISA.check_build puts it"
    )


def test_inductor_config_and_gemm_filter():
    import torch._inductor.config as config

    with compat.inductor_config({"cpp.simdlen": 256}):
        assert config.cpp.simdlen == 256, _changed("inductor_config", "torch._inductor.config.patch")

    def keep(choices):
        return choices

    from torch._inductor.select_algorithm import get_algorithm_selector_cache

    with compat.gemm_choices_filtered(keep):
        assert keep in get_algorithm_selector_cache().preprocessing_fns, _changed(
            "gemm_choices_filtered", "AlgorithmSelectorCache.add_preprocessing_fn"
        )
    assert keep not in get_algorithm_selector_cache().preprocessing_fns
    assert compat.is_cpp_gemm_template(object()) is False


def test_float_gemm_register_block_narrows_the_avx512_fp32_blocks_and_restores_them():
    from torch._inductor.codegen import cpp_micro_gemm
    from torch._inductor.cpu_vec_isa import VecAVX512

    def fp32_blocks():
        return {
            (c.register_blocking.block_m, c.register_blocking.block_n): c
            for configs in cpp_micro_gemm.micro_gemm_configs.values()
            for c in configs
            if c.vec_isa_cls is VecAVX512 and c.input_dtype == c.compute_dtype == torch.float32
        }

    before = fp32_blocks()
    assert {(8, 32), (16, 16)} <= set(before), _changed("float_gemm_register_block", "micro_gemm_configs")
    with compat.float_gemm_register_block((16, 16), min_rows=16):
        during = fp32_blocks()
        wide = during[(8, 32)]
        assert during[(16, 16)] is before[(16, 16)]
        assert not wide.extra_check(wide, 16, 32, 288, 1, 1), "16 rows, 32 columns: 16x16 only"
        assert wide.extra_check(wide, 1, 256, 512, 1, 1), "a 1-row product keeps inductor's choice"
        assert wide.extra_check(wide, 64, 24, 512, 1, 1), "columns 16 does not divide"
    assert fp32_blocks() == before and all(fp32_blocks()[b] is c for b, c in before.items())


def test_an_avx2_register_block_is_added_and_the_others_kept_off_its_products():
    from torch._inductor.codegen import cpp_micro_gemm
    from torch._inductor.cpu_vec_isa import VecAVX2

    configs = cpp_micro_gemm.micro_gemm_configs[cpp_micro_gemm.CppMicroGemmFP32Vec]
    before = list(configs)

    def avx2_fp32():
        return {
            (c.register_blocking.block_m, c.register_blocking.block_n): c
            for c in configs
            if c.vec_isa_cls is VecAVX2 and c.input_dtype == c.compute_dtype == torch.float32
        }

    assert (6, 16) not in avx2_fp32() and (4, 16) in avx2_fp32(), _changed(
        "float_gemm_register_block", "AVX2"
    )
    with compat.float_gemm_register_block((6, 16), min_rows=6, isa="VecAVX2"):
        during = avx2_fp32()
        six, four = during[(6, 16)], during[(4, 16)]
        assert six.extra_check(six, 400, 32, 256, 1, 1) and not four.extra_check(four, 400, 32, 256, 1, 1)
        assert not six.extra_check(six, 4, 32, 256, 1, 1), "4 rows: inductor's blocks"
        assert not six.extra_check(six, 400, 24, 256, 1, 1), "16 does not divide 24 columns"
        # A dynamic batch's rows (their size hint is the example's, here 1): 6x16 too.
        assert six.extra_check(six, 1, 32, 256, 1, 1, dynamic_M=True)
        assert not four.extra_check(four, 1, 32, 256, 1, 1, dynamic_M=True)
    assert configs == before


def test_micro_kernel_bodies_are_replaced_where_inductor_renders_the_known_one(monkeypatch):
    from torch._inductor.codegen import cpp_micro_gemm

    from tdaot import _torch_compat_gemm as gemm

    rendered = {"text": "head\n" + gemm.LAMBDA_BODY + "tail\n"}
    monkeypatch.setattr(
        cpp_micro_gemm.CppMicroGemmFP32Vec, "codegen_define", lambda self, kernel: rendered["text"]
    )
    with compat.float_micro_kernels_in_registers():
        out = cpp_micro_gemm.CppMicroGemmFP32Vec.codegen_define(None, None)
        assert out == "head\n" + gemm.REGISTER_BODY + "tail\n"
        rendered["text"] = "another body\n"
        assert cpp_micro_gemm.CppMicroGemmFP32Vec.codegen_define(None, None) == "another body\n"
    assert cpp_micro_gemm.CppMicroGemmFP32Vec.codegen_define(None, None) == "another body\n"


def test_one_row_gemm_blocks_are_added_for_one_row_products_only_and_removed():
    from torch._inductor.codegen import cpp_micro_gemm
    from torch._inductor.cpu_vec_isa import VecAVX2, VecAVX512

    configs = cpp_micro_gemm.micro_gemm_configs[cpp_micro_gemm.CppMicroGemmFP32Vec]
    before = list(configs)
    with compat.one_row_gemm_blocks({"VecAVX2": 64, "VecAVX512": 128}):
        added = [c for c in configs if all(c is not b for b in before)]
        assert {(c.vec_isa_cls, c.register_blocking.block_m, c.register_blocking.block_n) for c in added} == {
            (VecAVX2, 1, 64),
            (VecAVX512, 1, 128),
        }, _changed("one_row_gemm_blocks", "cpp_micro_gemm.generate_gemm_config")
        avx2 = next(c for c in added if c.vec_isa_cls is VecAVX2)
        assert avx2.input_dtype == avx2.compute_dtype == torch.float32
        assert avx2.extra_check(avx2, 1, 512, 3136, 1, 1)
        assert not avx2.extra_check(avx2, 2, 512, 3136, 1, 1), "two rows: inductor's blocks"
        assert not avx2.extra_check(avx2, 1, 12, 256, 1, 1), "64 does not divide 12 columns"
        assert not avx2.extra_check(avx2, 1, 512, 256, 1, 1, dynamic_M=True), "a dynamic batch"
    assert configs == before


def _isa_code(isa_class: str, simdlen: int, fn, inputs, patch=None):
    """``fn`` compiled by torch.compile for the vector ISA ``isa_class`` under ``patch`` (a
    tdaot._torch_compat context, or none): its outputs on ``inputs`` and its generated code."""
    from torch._inductor import config
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    with (
        config.patch({"cpp.simdlen": simdlen, "fx_graph_cache": False}),
        compat.vector_isas_limited_to((isa_class,)),
        patch if patch is not None else compat.inductor_config({}),
    ):
        out, (code, *_) = run_and_get_code(torch.compile(fn, dynamic=False), *inputs)
    return out, code


def _avx2_code(fn, inputs, patch=None):
    return _isa_code("VecAVX2", 256, fn, inputs, patch)


def _avx512_code(fn, inputs, patch=None):
    return _isa_code("VecAVX512", 512, fn, inputs, patch)


def _pixels_channels_last(*frames: torch.Tensor):
    # uint8 frames of 2, 3 and 4 channels to channels-last floats, as a pixel policy's first kernel.
    return tuple((x.float() * (1 / 255)).contiguous(memory_format=torch.channels_last) for x in frames)


@pytest.mark.slow  # two small inductor compiles for each ISA
@pytest.mark.parametrize(("flag", "compiled", "width", "permute"), [
    ("avx512f", _avx512_code, 16, "_mm512_permutex2var_ps"),
    ("avx2", _avx2_code, 8, "_mm256_permutevar8x32_ps"),
])  # fmt: skip
def test_channels_are_interleaved_by_permutes_and_match_eager(flag, compiled, width, permute):
    if flag not in Path("/proc/cpuinfo").read_text().split():
        pytest.skip(f"the host has no {flag}")
    gen = torch.Generator().manual_seed(0)
    frames = [torch.randint(0, 256, (3, c, 8, 48), dtype=torch.uint8, generator=gen) for c in (2, 3, 4)]
    expected = _pixels_channels_last(*frames)
    plain_out, plain_code = compiled(_pixels_channels_last, frames)
    fast_out, fast_code = compiled(_pixels_channels_last, frames, compat.channels_interleaved())
    for c in (2, 3, 4):
        call = f"transpose_mxn<float,static_cast<int64_t>({c}L),static_cast<int64_t>({width})"
        assert call in plain_code, _changed(
            "channels_interleaved", f"inductor no longer writes {c} channels channels-last by transpose_mxn"
        )
    assert "TDAOT_CHANNELS_INTERLEAVED" not in plain_code
    assert "tdaot_kernels::transposed<C>" in fast_code and permute in fast_code
    for out, plain, want in zip(fast_out, plain_out, expected):
        assert out.is_contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(out, want, rtol=0, atol=0)
        torch.testing.assert_close(plain, want, rtol=0, atol=0)


def _byte_kernels(x: torch.Tensor, codes: torch.Tensor, divisors: torch.Tensor):
    # uint8 and int8 loads of 8 and 16 lanes, a division by a loaded int8 among them.
    return x.float() * (1 / 255), (codes // divisors).float(), x[:, :8].float() + codes[:, 8:16].float()


@pytest.mark.slow  # two small inductor compiles
@pytest.mark.skipif("avx2" not in Path("/proc/cpuinfo").read_text(), reason="the host has no AVX2")
def test_byte_loads_are_direct_on_avx2_and_compute_what_the_header_does():
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (6, 32), dtype=torch.uint8, generator=gen)
    codes = torch.randint(-128, 128, (6, 32), dtype=torch.int8, generator=gen)
    divisors = torch.randint(1, 128, (6, 32), dtype=torch.int8, generator=gen)
    expected = _byte_kernels(x, codes, divisors)
    plain_out, plain_code = _avx2_code(_byte_kernels, (x, codes, divisors))
    direct_out, direct_code = _avx2_code(_byte_kernels, (x, codes, divisors), compat.byte_loads_direct())
    assert "Vectorized<uint8_t>::loadu(" in plain_code, _changed(
        "byte_loads_direct", "inductor no longer loads 8-bit vectors with Vectorized<T>::loadu(ptr, n)"
    )
    assert not re.search(r"Vectorized<u?int8_t>::loadu\(", direct_code)
    assert "_mm_loadl_epi64" in direct_code
    for out, plain, want in zip(direct_out, plain_out, expected):
        torch.testing.assert_close(out, want, rtol=0, atol=0)
        torch.testing.assert_close(plain, want, rtol=0, atol=0)


def _three_of_eight(x: torch.Tensor) -> torch.Tensor:
    return x[:, :3] * 2 + 1  # a loop of 3 inside one of 64: not merged, 3 < half an AVX2 vector


@pytest.mark.slow  # two small inductor compiles
@pytest.mark.skipif("avx2" not in Path("/proc/cpuinfo").read_text(), reason="the host has no AVX2")
def test_short_loops_are_left_scalar_on_avx2():
    x = torch.randn(64, 8)
    vector_out, vector_code = _avx2_code(_three_of_eight, (x,))
    scalar_out, scalar_code = _avx2_code(_three_of_eight, (x,), compat.short_loops_scalar())
    assert "at::vec::Vectorized<float>" in vector_code, _changed(
        "short_loops_scalar", "inductor no longer vectorizes a 3-long loop as a masked tail"
    )
    assert "at::vec::Vectorized<float>" not in scalar_code
    torch.testing.assert_close(scalar_out, _three_of_eight(x), rtol=0, atol=0)
    torch.testing.assert_close(vector_out, scalar_out, rtol=0, atol=0)


def _tanh_kernels(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # A float tanh (8 lanes) and a double one (left to at::vec), a tail of 5 in each row.
    return torch.tanh(x * 3), torch.tanh(x.double())


@pytest.mark.slow  # two small inductor compiles
@pytest.mark.skipif("avx2" not in Path("/proc/cpuinfo").read_text(), reason="the host has no AVX2")
def test_avx2_float_tanh_takes_sleefs_3_5_ulp_function():
    x = torch.linspace(-4, 4, 6 * 21).reshape(6, 21)
    x[0, :8] = torch.tensor([1e-7, -3e-5, 1e-3, 0.1, -0.5, 9.0, -20.0, 0.0])
    plain_out, plain_code = _avx2_code(_tanh_kernels, (x,))
    fast_out, fast_code = _avx2_code(_tanh_kernels, (x,), compat.tanh_within_3_5_ulp())
    assert ".tanh()" in plain_code and "Sleef_tanhf8_u35" not in plain_code, _changed(
        "tanh_within_3_5_ulp", "inductor no longer computes a float vector's tanh as at::vec's tanh()"
    )
    assert "Sleef_tanhf8_u35(" in fast_code
    assert ".tanh()" in fast_code  # the double vectors keep at::vec's
    exact = torch.tanh(x.double() * 3)
    ulp = (fast_out[0].double() - exact).abs() / torch.finfo(torch.float32).eps / exact.abs().clamp_min(1e-30)
    assert float(ulp.max()) <= 3.5 * 2, float(ulp.max())  # eps is 2 ulp of [1, 2): a loose bound
    torch.testing.assert_close(fast_out[0], plain_out[0], rtol=5e-7, atol=1e-30)
    torch.testing.assert_close(fast_out[1], plain_out[1], rtol=0, atol=0)


def test_archive_round_trip(tmp_path):
    path = str(tmp_path / "package.pt2")
    compat.write_archive(path, {"data/a.txt": b"alpha", "data/b.bin": b"\x00\x01"})
    records = compat.read_archive(path)
    assert records["data/a.txt"] == b"alpha" and records["data/b.bin"] == b"\x00\x01", _changed(
        "read_archive/write_archive", "torch.export.pt2_archive"
    )


class _PinsBatch(nn.Module):
    def forward(self, x):
        return x.reshape(4, -1)


class _Branches(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x + 1
        return x - 1


def _export_error(module: nn.Module, dynamic: bool, example: torch.Tensor | None = None) -> BaseException:
    args = (torch.randn(4, 3) if example is None else example,)
    shapes = ({0: torch.export.Dim("batch", min=1, max=64)},) if dynamic else None
    with pytest.raises(Exception) as info, compat.export_output_captured():
        torch.export.export(module, args, dynamic_shapes=shapes, strict=False)
    return info.value


def test_error_text_matches():
    pinned = _export_error(_PinsBatch(), dynamic=True)
    assert compat.is_batch_specialisation(pinned), _changed("is_batch_specialisation", str(pinned)[:300])
    branch = _export_error(_Branches(), dynamic=False)
    assert compat.is_data_dependent(branch), _changed("is_data_dependent", str(branch)[:300])
    assert not compat.is_batch_specialisation(branch)
    lines = [line for line in str(branch).splitlines() if line.strip()]
    advice = [line for line in lines if compat.is_advice(line)]
    assert advice, _changed("is_advice", "torch's debugging advice lines are worded differently")
    frame = compat.raising_frame(lines)
    assert frame and frame[0].endswith("test_torch_compat.py"), _changed(
        "raising_frame", "the 'The following call raised this error' block"
    )


def test_locked_parameter_message():
    sys.path.insert(0, str(PACKAGE.parents[1]))
    from examples.torchrl_policies import stacked_ensemble_policy

    policy, example = stacked_ensemble_policy()
    err = _export_error(_Positional(policy), dynamic=False, example=example["observation"])
    assert compat.is_locked_parameter(err), _changed("is_locked_parameter", str(err)[:300])


class _Positional(nn.Module):
    def __init__(self, module) -> None:
        super().__init__()
        self.module = module

    def forward(self, x):
        return self.module(TensorDict({"observation": x}, batch_size=x.shape[:1]))["action"]


def _private_torch_uses(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        name = ""
        if isinstance(node, ast.Attribute):
            name = ast.unparse(node)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            name = getattr(node, "module", None) or ",".join(a.name for a in node.names)
        if re.match(r"torch(\.\w+)*\._(?!_)", name):  # dunders (__version__) are public
            found.append(name)
    return found


def test_private_torch_apis_and_mock_only_in_the_compat_module():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        relative = path.relative_to(PACKAGE)
        if "unittest" in text and re.search(r"^\s*(from|import) unittest", text, re.M):
            offenders.append(f"{relative}: imports unittest (mock) in library code")
        if path.name.startswith("_torch_compat"):
            continue
        offenders += [f"{relative}: {use}" for use in _private_torch_uses(ast.parse(text))]
    assert not offenders, "private torch APIs outside tdaot/_torch_compat*.py:\n" + "\n".join(offenders)


def test_no_module_is_longer_than_450_lines():
    long = [
        f"{path.relative_to(PACKAGE)}: {n} lines"
        for path in sorted(PACKAGE.rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > 450
    ]
    assert not long, long


def test_no_cpp_source_is_longer_than_450_lines():
    cpp = PACKAGE.parents[1] / "cpp"
    long = [
        f"{path.relative_to(cpp)}: {n} lines"
        for path in sorted([*cpp.rglob("*.cpp"), *cpp.rglob("*.h")])
        if (n := len(path.read_text().splitlines())) > 450
    ]
    assert not long, long


@pytest.mark.skipif(sys.platform != "linux", reason="the package layout check reads the tree")
def test_no_subpackage_shadows_build():
    assert not (PACKAGE / "build").exists() and not (PACKAGE / "build.py").exists(), os.listdir(PACKAGE)


def test_proxy_executor_call_is_what_inductor_generates():
    import inspect

    from torch._inductor.codegen import cpp_wrapper_cpu

    assert compat.PROXY_EXECUTOR_CALL in inspect.getsource(cpp_wrapper_cpu), _changed(
        "PROXY_EXECUTOR_CALL", "the generated wrapper no longer calls aoti_torch_proxy_executor_call_function"
    )
    assert compat.calls_proxy_executor(
        {"m.wrapper.cpp": b"x = " + compat.PROXY_EXECUTOR_CALL.encode() + b"(e)"}
    )
    assert not compat.calls_proxy_executor({"m.wrapper.cpp": b"nothing", "m.kernel.cpp": b"nothing"})


def test_compiled_constants_are_every_constant_by_internal_name(tutorial):
    """The tutorial package's batch-1 latency model: its weights and biases (kept as constants)
    and the GEMM template's packed weights, by the names its wrapper declares."""
    records = compat.read_archive(tutorial[2].path)
    b1 = {
        name.replace("/b1/", "/model/"): data for name, data in records.items() if "/aotinductor/b1/" in name
    }
    constants = compat.compiled_constants(b1)
    (wrapper,) = [data.decode() for name, data in b1.items() if name.endswith(".wrapper.cpp")]
    declared = set(re.findall(r'constants_info_\[\d+\]\.name = "([^"]+)"', wrapper))
    assert declared and set(constants) == declared, _changed(
        "compiled_constants",
        f"the container runner lists {sorted(constants)}, the wrapper {sorted(declared)}",
    )
    assert all(isinstance(value, torch.Tensor) for value in constants.values())
    # Read from the library's bytes without loading it (an aarch64 model's way): the same tensors.
    read = compat.compiled_constants_read(b1)
    assert set(read) == set(constants), _changed("compiled_constants_read", "constants_info_ records")
    for name, value in constants.items():
        assert read[name].dtype == value.dtype and read[name].shape == value.shape, name
        assert torch.equal(read[name], value), _changed(
            "compiled_constants_read", f"the blob's layout ({name})"
        )
    damaged = {
        n: (d.replace(b".data_size = ", b".data_size = 1") if n.endswith(".cpp") else d)
        for n, d in b1.items()
    }
    with pytest.raises(
        RuntimeError, match=r"runs past the library's constants blob|do not add up to the blob"
    ):
        compat.compiled_constants_read(damaged)


# torch 2.11 (the GPU machines' torch) lacks both; 2.13 (CI's) has both; 2.12 is unchecked.
_TORCH = tuple(int(part) for part in torch.__version__.split(".")[:2])


@pytest.mark.skipif(_TORCH == (2, 12), reason="not checked against torch 2.12")
def test_inductor_options_and_the_arrayref_entry_point_are_as_known_for_this_torch():
    present = _TORCH >= (2, 13)
    assert compat.inductor_has_option("cpp.march") is present, _changed("inductor_has_option", "cpp.march")
    assert compat.has_arrayref_entry_point() is present, _changed(
        "has_arrayref_entry_point", "AOTInductorModelRunMinimalArrayrefInterfaceV2 in interface.h"
    )
    for name in ("cpp.simdlen", "cpp.threads", "always_keep_tensor_constants", "aot_inductor.metadata"):
        assert compat.inductor_has_option(name), _changed("inductor_has_option", name)
    assert not compat.inductor_has_option("cpp.no_such_option")


def test_without_the_arrayref_entry_point_no_model_is_built_for_the_bound_run(monkeypatch):
    from tdaot.builder import tuning

    monkeypatch.setattr(compat, "has_arrayref_entry_point", lambda: False)
    plans = tuning.plan_models("auto", (1, 4), "cpu", 1, 64) + tuning.plan_models(
        "latency", None, "cpu", 2, 2
    )
    assert [(plan.name, plan.bound) for plan in plans] == [
        ("model", False),
        ("b1", False),
        ("b4", False),
        ("model", False),
    ]


def test_a_cpu_target_level_is_refused_where_inductor_has_no_cpp_march(monkeypatch):
    import tdaot
    from tdaot.builder import targets

    monkeypatch.setattr(compat, "inductor_has_option", lambda name: False)
    with pytest.raises(
        tdaot.BuildError, match=r"cpu_target 'x86-64-v3' needs inductor's option cpp.march, which torch"
    ):
        targets.inductor_options(targets.CPU_TARGETS["x86-64-v3"])
    assert targets.inductor_options(targets.CPU_TARGETS["native"]) == {}


def test_output_clones_are_kept_through_remove_noop_ops():
    """Two outputs cloned from views of one intermediate (a GRU step's output and next state):
    torch 2.13's remove_noop_ops makes both views of it; output_clones_kept keeps each clone."""
    from torch._inductor.fx_passes import post_grad
    from torch._inductor.fx_utils import get_node_storage
    from torch.fx.experimental.proxy_tensor import make_fx

    def step(x):
        h = x.relu()
        return h.view(1, 4).clone(), h.view(1, 1, 4).clone()

    def storages() -> int:
        graph = make_fx(step, tracing_mode="fake")(torch.randn(4)).graph
        post_grad.remove_noop_ops(graph)
        return len({get_node_storage(node) for node in graph.output_node().args[0]})

    assert storages() == 1, _changed("output_clones_kept", "remove_noop_ops keeps output clones now")
    with compat.output_clones_kept():
        assert storages() == 2
    assert storages() == 1  # restored


def test_inductors_compile_commands_go_to_the_runner_and_back():
    # compiler_cache routes inductor's compiles through ccache by replacing this one function.
    from torch._inductor import cpp_builder

    from tdaot._torch_compat_paths import compile_commands_run_by

    assert list(inspect.signature(cpp_builder._run_compile_cmd).parameters) == ["cmd_line", "cwd"], (
        "torch._inductor.cpp_builder._run_compile_cmd(cmd_line, cwd) changed"
    )
    seen, plain = [], cpp_builder._run_compile_cmd
    with compile_commands_run_by(lambda cmd_line, cwd, own: seen.append((cmd_line, cwd, own))):
        cpp_builder.run_compile_cmd("g++ a.cpp -c", cwd="/src")  # what inductor's builder calls
    assert seen == [("g++ a.cpp -c", "/src", plain)] and cpp_builder._run_compile_cmd is plain


def test_vector_isa_set_to_neon_without_a_probe_and_restored():
    before = compat.picked_vector_isa()
    with compat.vector_isa_set_to("VecNEON"):
        assert compat.picked_vector_isa() == compat.CROSS_ISAS["VecNEON"] == "asimd", _changed(
            "vector_isa_set_to", "cpu_vec_isa.VecNEON / valid_vec_isa_list / cpp.vec_isa_ok"
        )
    assert compat.picked_vector_isa() == before
    with pytest.raises(RuntimeError, match=r"inductor has no vector ISA VecNope"):
        with compat.vector_isa_set_to("VecNope"):
            pass


def test_compiles_with_include_first_puts_the_folder_ahead_of_torchs():
    line = "g++ /tmp/a.cpp -I/torch/include -o 'a b.so'"
    assert (
        compat.with_include_first(line, "/tmp/inc dir")
        == "g++ '-I/tmp/inc dir' /tmp/a.cpp -I/torch/include -o 'a b.so'"
    )
    from torch._inductor import cpp_builder

    seen = []
    plain = cpp_builder._run_compile_cmd
    cpp_builder._run_compile_cmd = lambda cmd, cwd: seen.append(cmd)
    try:
        with compat.compiles_with_include_first("/inc"):
            cpp_builder._run_compile_cmd("g++ -c x.cpp", "/tmp")
    finally:
        cpp_builder._run_compile_cmd = plain
    assert seen == ["g++ -I/inc -c x.cpp"], _changed(
        "compiles_with_include_first", "cpp_builder._run_compile_cmd"
    )
