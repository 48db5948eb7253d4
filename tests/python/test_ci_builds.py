"""`tdaot build --config`: targets, cache, shards, parallel jobs, parity gate, reports."""

from __future__ import annotations

import io
import json
import subprocess
import textwrap
import time
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT

import tdaot
from tdaot.builder import BuildOptions
from tdaot.builder.config import BuildSpec, load_config
from tdaot.builder.jobs import select_shard
from tdaot.builder.progress import Progress
from tdaot.cli import main
from tdaot.errors import ConfigError
from tdaot.signing import key_id, keygen

POLICIES = ROOT / "examples" / "policies.py"

NOISY_FACTORY = textwrap.dedent(
    """
    import torch
    from tensordict import TensorDict
    from tensordict.nn import TensorDictModule
    from torch import nn

    class Drifting(nn.Module):
        def forward(self, x):
            # Traced and eager code differ: the artifact adds 1, the eager policy does not.
            return x + 1 if torch.compiler.is_exporting() else x

    def noisy():
        module = TensorDictModule(Drifting(), in_keys=["x"], out_keys=["y"])
        return module, TensorDict({"x": torch.zeros(4, 3)}, batch_size=[4])
    """
)


def _write_config(directory: Path, body: str) -> Path:
    path = directory / "tdaot.toml"
    path.write_text(textwrap.dedent(body))
    return path


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A config of two artifacts (the nested one for two CPU targets), built once."""
    root = tmp_path_factory.mktemp("project")
    config = _write_config(
        root,
        f"""
        [defaults]
        output_dir = "dist"
        batch = [1, 64]
        tuning = "throughput"  # one model per package: these tests are about the config builds

        [[artifact]]
        name = "tutorial"
        factory = "{POLICIES}:tutorial_policy"
        out_keys = ["sample"]

        [[artifact]]
        name = "nested"
        factory = "{POLICIES}:nested_policy"
        cpu_targets = ["native", "x86-64-v3"]
        """,
    )
    cache = root / "cache"
    argv = ["build", "--config", str(config), "--cache-dir", str(cache)]
    code = main([*argv, "--report", str(root / "first.json"), "--junit", str(root / "first.xml")])
    return {"root": root, "config": config, "argv": argv, "code": code}


def _results(path: Path) -> dict[str, dict]:
    return {r["id"]: r for r in json.loads(path.read_text())["results"]}


def test_config_builds_every_artifact_and_target_with_parity(project):
    assert project["code"] == 0
    results = _results(project["root"] / "first.json")
    assert sorted(results) == ["nested@native", "nested@x86-64-v3", "tutorial@native"]
    for result in results.values():
        assert result["status"] == "built" and not result["cache_hit"]
        assert len(result["sha256"]) == 64 and result["size_bytes"] > 0
        assert result["parity"] and all(row["max_abs"] <= 1e-5 for row in result["parity"])
    dist = project["root"] / "dist"
    assert sorted(p.name for p in dist.iterdir()) == [
        "nested-native.pt2",
        "nested-x86-64-v3.pt2",
        "tutorial.pt2",
    ]
    manifest = tdaot.read_manifest(dist / "nested-x86-64-v3.pt2")
    assert (manifest.cpu_target, manifest.cpu_isa, manifest.batch) == (
        "x86-64-v3",
        "avx2",
        tdaot.BatchRange(1, 64),
    )
    assert tdaot.read_manifest(dist / "tutorial.pt2").output_keys == ["sample"]


def test_x86_64_v3_package_has_no_avx512_instruction(project, tmp_path):
    with zipfile.ZipFile(project["root"] / "dist" / "nested-x86-64-v3.pt2") as package:
        library = next(n for n in package.namelist() if n.endswith(".so"))
        (tmp_path / "model.so").write_bytes(package.read(library))
    disassembly = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", str(tmp_path / "model.so")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "ymm" in disassembly  # vectorised for AVX2 ...
    assert "zmm" not in disassembly and "%k1" not in disassembly  # ... with no AVX-512 register


def test_rebuild_with_nothing_changed_is_a_fast_cache_hit(project):
    root = project["root"]
    started = time.perf_counter()
    assert main([*project["argv"], "--no-parity", "--report", str(root / "second.json")]) == 0
    elapsed = time.perf_counter() - started
    results = _results(root / "second.json")
    first = _results(root / "first.json")
    assert all(r["status"] == "cached" and r["cache_hit"] for r in results.values())
    assert {i: r["sha256"] for i, r in results.items()} == {i: r["sha256"] for i, r in first.items()}
    print(f"3 cache hits in {elapsed:.2f} s")  # reported, not asserted: timing is the README's business


def test_any_change_rebuilds_and_no_cache_forces_it(project, tmp_path):
    root = project["root"]
    changed = _write_config(
        tmp_path,
        f"""
        [[artifact]]
        name = "tutorial"
        factory = "{POLICIES}:tutorial_policy"
        out_keys = ["loc"]
        batch = [1, 64]
        tuning = "throughput"
        """,
    )
    report = tmp_path / "r.json"
    assert (
        main(["build", "--config", str(changed), "--cache-dir", str(root / "cache"), "--report", str(report)])
        == 0
    )
    assert _results(report)["tutorial@native"]["status"] == "built"
    assert (
        main([*project["argv"], "--no-cache", "--no-parity", "--shard", "2/3", "--report", str(report)]) == 0
    )
    assert [r["status"] for r in _results(report).values()] == ["built"]


def test_the_builder_signs_what_it_builds(project, tmp_path):
    keygen(tmp_path / "keys")
    other_private, other_public = keygen(tmp_path / "other")
    config = _write_config(
        tmp_path,
        f"""
        [defaults]
        output_dir = "signed"
        batch = [1, 64]
        sign_key = "keys/private.pem"  # relative to the config file
        tuning = "throughput"  # as the project's: its cached artifact

        [[artifact]]
        name = "tutorial"
        factory = "{POLICIES}:tutorial_policy"
        out_keys = ["sample"]
        """,
    )
    argv = ["build", "--config", str(config), "--cache-dir", str(project["root"] / "cache"), "--no-parity"]
    package = tmp_path / "signed" / "tutorial.pt2"
    assert main([*argv, "--report", str(tmp_path / "report.json")]) == 0
    [result] = _results(tmp_path / "report.json").values()
    assert result["cache_hit"]  # signing is not part of the compiled artifact
    assert result["signed_by"] == key_id(tmp_path / "keys" / "private.pem")
    assert tdaot.verify_package(package, trusted_keys=[tmp_path / "keys" / "public.pem"]) == result["sha256"]
    # --sign-key overrides the config (a CI secret's path)
    assert main([*argv, "--sign-key", str(other_private), "--report", str(tmp_path / "other.json")]) == 0
    assert _results(tmp_path / "other.json")["tutorial@native"]["signed_by"] == key_id(other_private)
    tdaot.verify_package(package, trusted_keys=[other_public])


def test_parallel_jobs_build_in_separate_processes(project, tmp_path):
    report = tmp_path / "jobs.json"
    assert main([*project["argv"], "--jobs", "2", "--no-parity", "--report", str(report)]) == 0
    assert sorted(r["status"] for r in _results(report).values()) == ["cached"] * 3


def test_shards_cover_the_list_exactly_once():
    specs = [BuildSpec(f"p{i}", "f.py:f", f"/o/p{i}.pt2", True, BuildOptions()) for i in range(7)]
    shards = [select_shard(specs, f"{i}/3") for i in (1, 2, 3)]
    assert sorted(s.id for shard in shards for s in shard) == sorted(s.id for s in specs)
    assert [len(s) for s in shards] == [3, 2, 2]
    assert select_shard(list(reversed(specs)), "2/3") == shards[1]  # stable whatever the order
    for bad in ("0/3", "4/3", "1-3", "a/b"):
        with pytest.raises(ConfigError, match=f"shard '{bad}' must be I/N"):
            select_shard(specs, bad)


def test_reports_merge_and_overlap_is_refused(project, tmp_path, capsys):
    root = project["root"]
    for shard in ("1/2", "2/2"):
        argv = [
            *project["argv"],
            "--no-parity",
            "--shard",
            shard,
            "--report",
            str(tmp_path / f"{shard[0]}.json"),
        ]
        assert main(argv) == 0
    merged = tmp_path / "merged.json"
    junit = tmp_path / "merged.xml"
    assert main(["report", "merge", str(tmp_path / "1.json"), str(tmp_path / "2.json"), "-o", str(merged),
                 "--junit", str(junit)]) == 0  # fmt: skip
    assert sorted(_results(merged)) == sorted(_results(root / "first.json"))
    suite = ET.parse(junit).getroot()
    assert (suite.get("tests"), suite.get("failures")) == ("3", "0")
    assert (
        main(["report", "merge", str(tmp_path / "1.json"), str(tmp_path / "1.json"), "-o", str(merged)]) == 1
    )
    assert "shards overlap" in capsys.readouterr().err


def test_parity_failure_fails_the_build_with_the_error_table(tmp_path, capsys):
    (tmp_path / "noisy.py").write_text(NOISY_FACTORY)
    config = _write_config(
        tmp_path,
        """
        [[artifact]]
        name = "noisy"
        factory = "noisy.py:noisy"
        tuning = "throughput"  # one model: what is checked is the parity gate's report
        """,
    )
    report, junit = tmp_path / "r.json", tmp_path / "r.xml"
    assert (
        main(["build", "--config", str(config), "--no-cache", "--report", str(report), "--junit", str(junit)])
        == 1
    )
    err = capsys.readouterr().err
    assert "noisy@native failed: AssertionError: native artifact" in err
    result = _results(report)["noisy@native"]
    assert result["status"] == "failed" and "max abs err" in result["error"] and "MISMATCH" in result["error"]
    failure = ET.parse(junit).getroot().find("testcase/failure")
    assert failure is not None and "differs from the eager policy" in failure.get("message")


@pytest.mark.slow  # two builds from cold inductor caches
def test_reproducibility_is_checked_and_reported(tmp_path, tutorial_b14):
    # The artifact itself is conftest's tutorial at batch 1..64 (a cache hit where the C++
    # suite's cache was copied): the check's own two rebuilds compile without a cache.
    cache = tutorial_b14[3]
    config = _write_config(
        tmp_path,
        f"""
        [[artifact]]
        name = "tutorial"
        factory = "{POLICIES}:tutorial_policy"
        batch = [1, 64]
        parity = false
        """,
    )
    report = tmp_path / "r.json"
    command = ["build", "--config", str(config), "--cache-dir", str(cache.directory), "--check-reproducible"]
    assert main([*command, "--report", str(report)]) == 0
    result = _results(report)["tutorial@native"]
    assert result["reproducible"] is True and result["differing_entries"] == []


A = "[[artifact]]\nname = 'a'\nfactory = 'f.py:f'\n"  # a valid entry to extend
CONFIG_ERRORS = [
    ("[[artifact]]\nname = 'a'\n", r"artifact #1 \('a'\): field 'factory': missing"),
    (A + "batch_size = 3\n", r"\('a'\): unknown field 'batch_size'"),
    (A + "cpu_targets = ['x86-64-v9']\n", r"field 'cpu_targets': 'x86-64-v9' is not one of native"),
    (A + "batch = [1]\n", r"field 'batch': expected \[min, max\]"),
    (A + "kernel_threads = -2\n", r"field 'kernel_threads': expected 0 \(decided at run time\)"),
    (A + "interaction_type = 'greedy'\n", r"field 'interaction_type': 'greedy'"),
    (
        A + "cpu_targets = ['native', 'x86-64-v3']\noutput = 'a.pt2'\n",
        r"'output': 'a.pt2' must contain \{target\}",
    ),
    ("[[artifact]]\nname = 'a b'\nfactory = 'f.py:f'\n", r"field 'name': 'a b' must be letters"),
    (
        A + "[[artifact]]\nname = 'b'\nfactory = 'f.py:f'\noutput = 'a.pt2'\n",
        r"b@native and a@native both write .*a.pt2",
    ),
    ("[defaults]\nparity = 'yes'\n" + A, r"field 'parity': expected true"),
    ("[defaults]\ncpu_target = 'native'\n", r"\[defaults\]: unknown field 'cpu_target'"),
    ("[artifacts]\n", r"unknown table\(s\) \['artifacts'\]"),
    ("", r"no \[\[artifact\]\] entries"),
    ("[[artifact]\n", r"is not valid TOML"),
]


@pytest.mark.parametrize(("body", "message"), CONFIG_ERRORS)
def test_bad_config_names_the_entry_and_field(tmp_path, capsys, body, message):
    config = tmp_path / "tdaot.toml"
    config.write_text(body)
    with pytest.raises(ConfigError, match=message):
        load_config(config)
    assert main(["build", "--config", str(config)]) == 2
    assert capsys.readouterr().err.startswith("tdaot build: error: ")


def test_pyproject_tool_table_is_read(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text("[tool.tdaot]\n[[tool.tdaot.artifact]]\nname = 'a'\nfactory = 'pol.py:make'\n")
    (spec,) = load_config(pyproject)
    assert (spec.factory, spec.output) == (f"{tmp_path / 'pol.py'}:make", str(tmp_path / "dist" / "a.pt2"))
    pyproject.write_text("[project]\nname = 'x'\n")
    with pytest.raises(ConfigError, match=r"has no \[tool.tdaot\] table"):
        load_config(pyproject)


def test_factory_and_config_are_exclusive(capsys):
    assert main(["build", "x.py:f", "--config", "tdaot.toml"]) == 2
    assert "either a factory with -o, or --config" in capsys.readouterr().err
    assert main(["build", "x.py:f"]) == 2
    assert "give a factory and -o OUTPUT.pt2" in capsys.readouterr().err


def test_progress_plain_lines_and_live_redraw():
    plain = io.StringIO()
    progress = Progress(["a@native", "bb@x86-64-v3"], stream=plain, live=False)
    progress.update("a@native", "exporting")
    progress.update("a@native", "failed", "ExportError: boom")
    lines = plain.getvalue().splitlines()
    assert lines[0] == "tdaot: 2 artifact(s) queued"
    assert lines[1].startswith("a@native      exporting") and lines[1].endswith("s")
    assert "failed" in lines[2] and lines[2].endswith("ExportError: boom")
    live = io.StringIO()
    progress = Progress(["a@native"], stream=live, live=True)
    progress.update("a@native", "compiling")
    assert "\x1b[1F" in live.getvalue() and "\x1b[2K" in live.getvalue()
