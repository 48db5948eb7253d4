"""The build side of the lite runtime (tdaot::lite, no libtorch): bound models link no libtorch,
their needs are read from the ELF file, the manifest says per model whether it runs lite and
why not, ``require_lite`` fails a build naming the model and the symbols, a specialised model
that needs libtorch warns (LiteWarning), and ``tdaot inspect`` says what the lite runtime serves.

No compile of its own: the shared tutorial packages (conftest), and rebuilds from the
tutorial_b14 cache (the lite record is read again from the cached units' libraries).
"""

from __future__ import annotations

import dataclasses
import warnings

import pytest

import tdaot
from tdaot import _torch_compat
from tdaot.builder import lite, lite_symbols
from tdaot.cli import main
from tdaot.manifest import LiteSupport, Manifest

LIBRARY = "data/aotinductor/{}/"


def _library(path, model: str) -> bytes:
    records = _torch_compat.read_archive(path)
    (data,) = [d for name, d in records.items() if LIBRARY.format(model) in name and name.endswith(".so")]
    return data


def _models(manifest: Manifest) -> dict:
    return {m.name: m for m in manifest.models}


def test_the_symbol_reader_reads_what_a_bound_model_needs(tutorial):
    data = _library(tutorial[2].path, "b1")
    needs = lite.undefined_symbols(data)
    assert needs == sorted(needs) and "aoti_torch_get_data_ptr" in needs
    # The C and C++ runtime's (versioned GLIBC_*, GLIBCXX_*, ...) and weak references are left out.
    assert not [s for s in needs if s in ("memcpy", "malloc", "__cxa_finalize", "__gmon_start__")]
    assert not [s for s in needs if s.startswith(("_ZNSt", "_ZSt", "_Unwind"))]
    assert not [lib for lib in lite.needed_libraries(data) if lib.startswith(("libtorch", "libc10"))]
    # The throughput model still links libtorch and calls ATen.
    model = _library(tutorial[2].path, "model")
    assert "libtorch_cpu.so" in lite.needed_libraries(model)
    assert "aoti_torch_cpu_addmm_out" in lite.undefined_symbols(model)


def test_a_file_that_is_not_elf_is_a_build_error():
    with pytest.raises(tdaot.BuildError, match=r"the library of model 'b1' is not an ELF shared library"):
        lite.undefined_symbols(b"#!/bin/sh\n", "the library of model 'b1'")


def test_the_bound_model_runs_lite_and_the_throughput_model_says_why_not(tutorial):
    models = _models(tutorial[2].manifest)
    b1 = models["b1"].lite
    assert b1.runs and b1.needs and all(lite_symbols.provided(s) for s in b1.needs)
    assert b1.needs == tuple(lite.undefined_symbols(_library(tutorial[2].path, "b1")))
    assert not b1.missing and not b1.why
    throughput = models["model"].lite
    assert not throughput.runs and "aoti_torch_cpu_addmm_out" in throughput.missing
    assert throughput.why.startswith("dynamic-batch throughput model: not built for the bound run")
    assert "needs libtorch: aoti_torch_cpu_addmm_out (ATen addmm)" in throughput.why


def test_the_lite_record_round_trips_through_the_cpp_parser(tutorial):
    manifest = tutorial[2].manifest
    assert Manifest.from_json(manifest.to_json()) == manifest
    assert manifest.to_dict()["models"][1]["lite"] == {
        "runs": True,
        "needs": list(_models(manifest)["b1"].lite.needs),
    }
    assert set(manifest.to_dict()["models"][0]["lite"]) == {"runs", "needs", "missing", "why"}


def test_operator_names_and_reasons():
    assert lite.operator_of("aoti_torch_cpu_addmm_out") == "addmm"
    assert lite.operator_of("aoti_torch_cpu__convolution") == "_convolution"
    assert lite.operator_of("aoti_torch_cpu_mkldnn_rnn_layer") == "mkldnn_rnn_layer"
    assert lite.operator_of("aoti_torch_clone") is None
    spec = tdaot.ModelSpec("b1", tdaot.BatchRange(1, 1), "latency")
    assert lite._lacking([lite.PROXY_EXECUTOR]) == [
        "calls operators through AOTInductor's proxy executor (aoti_torch_proxy_executor_call_function)"
    ]
    assert lite._not_bound(spec) == "batch-1 model: not built for the bound run (its array-ref build refused)"
    assert lite._not_bound(dataclasses.replace(spec, batch=tdaot.BatchRange(32, 32))) == (
        "batch-32 model: the bound run is built for batches up to 16"
    )


def _without_lite(manifest: Manifest, name: str, missing: str) -> Manifest:
    record = LiteSupport(False, (missing,), (missing,), f"needs libtorch: {missing}")
    models = tuple(dataclasses.replace(m, lite=record) if m.name == name else m for m in manifest.models)
    return dataclasses.replace(manifest, models=models)


def test_check_fails_or_warns_naming_the_model_and_the_symbols(tutorial):
    manifest = _without_lite(tutorial[2].manifest, "b1", "aoti_torch_cpu_addmm_out")
    with pytest.raises(
        tdaot.BuildError,
        match=r"require_lite: .* model 'b1' \(batch 1\) does not run on the lite runtime: needs libtorch: "
        r"aoti_torch_cpu_addmm_out \(lacks aoti_torch_cpu_addmm_out\)",
    ):
        lite.check(manifest, require=True)
    with pytest.warns(tdaot.LiteWarning, match=r"model 'b1' \(batch 1\) .*; it needs libtorch"):
        lite.check(manifest, require=False)
    # The throughput model never warns.
    throughput_only = _without_lite(tutorial[2].manifest, "model", "aoti_torch_cpu_addmm_out")
    with warnings.catch_warnings():
        warnings.simplefilter("error", tdaot.LiteWarning)
        lite.check(throughput_only, require=True)


def test_require_lite_without_a_specialised_model_fails_before_compiling(tmp_path):
    from examples.policies import tutorial_policy

    policy, example = tutorial_policy()
    statuses = []
    with pytest.raises(tdaot.BuildError, match=r"require_lite: the package of .* has no specialised model"):
        tdaot.build(
            policy,
            example,
            tmp_path / "t.pt2",
            tuning="throughput",
            require_lite=True,
            on_status=statuses.append,
        )
    assert statuses == ["exporting"] and not (tmp_path / "t.pt2").exists()


def test_cached_units_get_the_record_and_require_lite_refuses_what_lacks_a_symbol(
    tutorial_b14, tmp_path, monkeypatch
):
    policy, example, artifact, cache = tutorial_b14
    options = {
        "batch": (1, 64),
        "specialize": (1, 4),
        "cache": cache,
        "factory": artifact.manifest.source.factory,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error", tdaot.LiteWarning)
        again = tdaot.build(policy, example, tmp_path / "again.pt2", require_lite=True, **options)
    assert again.cache_hit and again.manifest.models == artifact.manifest.models
    assert [m.name for m in again.manifest.models if m.lite.runs] == ["b1", "b4"]

    # The lite runtime without aoti_torch_get_data_ptr: both specialised models need libtorch.
    monkeypatch.setattr(lite, "provided", lambda symbol: symbol != "aoti_torch_get_data_ptr")
    with pytest.raises(
        tdaot.BuildError,
        match=r"model 'b1' \(batch 1\) does not run on the lite runtime: needs libtorch: "
        r"aoti_torch_get_data_ptr \(lacks aoti_torch_get_data_ptr\); model 'b4' \(batch 4\)",
    ):
        tdaot.build(policy, example, tmp_path / "refused.pt2", require_lite=True, **options)
    assert not (tmp_path / "refused.pt2").exists()
    with pytest.warns(tdaot.LiteWarning) as caught:
        warned = tdaot.build(policy, example, tmp_path / "warned.pt2", **options)
    assert sorted(str(w.message).split(": model ")[1][:4] for w in caught) == ["'b1'", "'b4'"]
    assert all(w.filename == __file__ for w in caught)  # points at the caller of tdaot.build
    assert not _models(warned.manifest)["b1"].lite.runs


def test_inspect_shows_which_models_and_batches_run_lite(tutorial, tutorial_b14, capsys):
    assert main(["inspect", tutorial[2].path]) == 0
    table = capsys.readouterr().out
    assert "\n  models\n" in table and "model model" not in table
    assert "\n    b1              batch 1, latency, lite" in table
    dynamic = "\n    model           batch 1..1048576, throughput, needs libtorch (dynamic-batch throughput"
    assert dynamic in table
    # Its largest intermediate is 256 bytes a row: slices of 3 MiB (tuning.SLICE_BYTES), a power of 2.
    assert "; calls of more than 8192 rows run in slices" in table
    assert "lite runtime      serves batch 1 (model b1)" in table
    assert main(["inspect", tutorial_b14[2].path]) == 0
    assert "lite runtime      serves batch 1 (model b1), 4 (model b4)" in capsys.readouterr().out
    # A manifest without lite records says nothing about it.
    bare = dataclasses.replace(
        tutorial[2].manifest,
        models=tuple(dataclasses.replace(m, lite=None) for m in tutorial[2].manifest.models),
    )
    assert "lite" not in bare.describe()
    no_lite = _without_lite(tutorial[2].manifest, "b1", "x")
    assert "lite runtime      serves no batch (every model needs libtorch)" in no_lite.describe()


def test_every_build_option_reaches_the_command_line_and_the_config(capsys):
    with pytest.raises(SystemExit):
        main(["build", "--help"])
    assert "--require-lite" in capsys.readouterr().out
    assert tdaot.BuildOptions(require_lite=True).require_lite
    with pytest.raises(tdaot.BuildError, match=r"require_lite='yes': expected true or false"):
        tdaot.BuildOptions(require_lite="yes")
