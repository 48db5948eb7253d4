"""The tdaot command line: build and inspect, and every error a user can hit."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import ROOT

import tdaot
from tdaot.cli import main

FACTORIES = textwrap.dedent(
    """
    import torch
    from tensordict import TensorDict
    from tensordict.nn import TensorDictModule
    from torch import nn

    class DataDependent(nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x
            return -x

    def raises():
        raise RuntimeError("no checkpoint at /robots/arm.ckpt")

    def wrong_shape():
        return nn.Linear(3, 2)

    def data_dependent():
        module = TensorDictModule(DataDependent(), in_keys=["x"], out_keys=["y"])
        return module, TensorDict({"x": torch.randn(4, 3)}, batch_size=[4])
    """
)


@pytest.fixture(scope="module")
def factories(tmp_path_factory):
    path = tmp_path_factory.mktemp("factories") / "factories.py"
    path.write_text(FACTORIES)
    return path


@pytest.fixture(scope="module")
def cli_package(tmp_path_factory):
    """Builds through the real console entry point, with a bounded batch range."""
    out = tmp_path_factory.mktemp("cli") / "sub" / "tutorial.pt2"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tdaot",
            "build",
            "examples/policies.py:tutorial_policy",
            "-o",
            str(out),
            "--batch",
            "1:8",
            "--out-key",
            "sample",
            "--tuning",  # one model: what is checked here is the command line, not the tuning
            "throughput",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return out, result.stdout


def test_build_prints_path_size_times_and_manifest(cli_package):
    out, stdout = cli_package
    assert f"built {out}" in stdout and "KiB" in stdout and "s compile" in stdout
    assert "batch             1..8" in stdout
    assert "examples/policies.py:tutorial_policy" in stdout
    assert f"sha256 {hashlib.sha256(out.read_bytes()).hexdigest()} (pin it" in stdout


def test_built_package_has_the_options_and_enforces_its_range(cli_package):
    out, _ = cli_package
    native = tdaot.load(out)
    assert native.manifest.output_keys == ["sample"]
    assert native.manifest.batch == tdaot.BatchRange(1, 8)
    assert native(observation=torch.zeros(8, 3))["sample"].shape == (8, 2)
    with pytest.raises(
        tdaot.BatchSizeError,
        match=r"'observation' has batch size 9, but the package accepts batch sizes 1\.\.8",
    ):
        native(observation=torch.zeros(9, 3))


def test_inspect_table_and_json(cli_package, capsys):
    out, _ = cli_package
    assert main(["inspect", str(out)]) == 0
    table = capsys.readouterr().out
    assert "observation  float32   [B, 3]" in table and "sample" in table
    assert main(["inspect", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == tdaot.read_manifest(out).to_dict()


def test_verify_prints_the_digest_and_refuses_a_wrong_pin(cli_package, capsys):
    out, _ = cli_package
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    assert main(["verify", str(out), "--sha256", digest]) == 0
    printed = capsys.readouterr().out
    assert f"files match their sha256 digests; the package matches --sha256\nsha256 {digest}" in printed
    assert main(["verify", str(out), "--sha256", "0" * 64]) == 1
    assert f"IntegrityError: package '{out}' has sha256 {digest}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("factory", "code", "message"),
    [
        ("missing/policies.py:tutorial_policy", 2, "factory file 'missing/policies.py' does not exist"),
        ("examples/policies.py:no_such_policy", 2, "has no callable 'no_such_policy'"),
        (
            "no_such_module_xyz:policy",
            2,
            r"cannot import module 'no_such_module_xyz': ModuleNotFoundError: No module named "
            r"'no_such_module_xyz'; for a policy file, name it as path/to/file.py:policy "
            r"\(FILE.py:FUNCTION\)",
        ),
        ("examples/policies.py", 2, "must look like FILE.py:FUNCTION"),
        ("{factories}:raises", 2, r"raised RuntimeError: no checkpoint at /robots/arm.ckpt"),
        ("{factories}:wrong_shape", 2, r"must return \(module, example_tensordict\), got Linear"),
        (
            "{factories}:data_dependent",
            1,
            r"ExportError: torch.export failed for .*TensorDictModule.*\n    \w+",
        ),
    ],
)
def test_build_errors_exit_non_zero_with_a_message(factories, capsys, monkeypatch, factory, code, message):
    monkeypatch.chdir(ROOT)
    assert main(["build", factory.format(factories=factories), "-o", "/tmp/never-written.pt2"]) == code
    # torch may log to stderr before failing; our report is the last thing printed.
    err = capsys.readouterr().err
    report = err[err.rindex("tdaot build: ") :]
    assert re.search(message, report), err


def test_a_module_name_of_a_file_here_is_told_the_file_form(tmp_path, capsys, monkeypatch):
    (tmp_path / "mypolicy.py").write_text("def factory():\n    raise AssertionError\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    assert main(["build", "mypolicy:factory", "-o", "out.pt2"]) == 2
    assert capsys.readouterr().err == (
        "tdaot build: error: cannot import module 'mypolicy': ModuleNotFoundError: No module named "
        "'mypolicy'; 'mypolicy.py' is a file here: name it as mypolicy.py:factory (FILE.py:FUNCTION)\n"
    )


def test_verify_refuses_a_pin_that_is_not_a_digest_as_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["verify", "any.pt2", "--sha256", "abc"])
    assert info.value.code == 2
    assert "argument --sha256: 'abc' is not a sha256 digest (64 hex digits" in capsys.readouterr().err


def test_build_help_states_each_default_as_the_option_table_does(capsys):
    with pytest.raises(SystemExit):
        main(["build", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    start = text.index("--specialize N[,N...] batch sizes")
    specialize = text[start : text.index("(default:", start) + len("(default: 1)")]
    assert "(default: 1)" in specialize and "None" not in specialize
    spec = importlib.util.spec_from_file_location("gen_build_options", ROOT / "docs" / "gen_build_options.py")
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    row = next(line for line in table.render().splitlines() if "<code>specialize</code>" in line)
    assert "| <code>1</code> |" in row


def test_unwritable_output_is_an_error(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["build", "examples/policies.py:tutorial_policy", "-o", "/dev/null/x.pt2"]) == 1
    assert "/dev/null/x.pt2" in capsys.readouterr().err


def test_bad_batch_argument_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["build", "examples/policies.py:tutorial_policy", "-o", "x.pt2", "--batch", "lots"])
    assert info.value.code == 2
    assert "'lots': expected dynamic, static" in capsys.readouterr().err


def test_inspect_of_a_non_package_names_the_path(tmp_path, capsys):
    path = tmp_path / "notes.pt2"
    path.write_text("hello")
    assert main(["inspect", str(path)]) == 1
    assert f"PackageError: package '{path}' is not a .pt2 package" in capsys.readouterr().err
