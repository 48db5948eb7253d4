"""The C++ tools as commands (tdaot.tools, the wheel's console scripts tdaot-run, tdaot-lite and
tdaot-rehearse): each runs the executable inside the tdaot package with its own command line, or
says where it looked and how to get it."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys

import pytest

from tdaot import tools

LAUNCH = """
import sys
from pathlib import Path
from tdaot import tools
here = sys.argv[1]
tools.package_dirs = lambda: [here]
tools.CHECKOUT = Path(here) / "no-checkout"
sys.argv = ["tdaot-lite", "inspect", "a package.pt2"]
tools.lite()
"""


def test_each_tool_is_a_console_script_of_the_distribution():
    scripts = {e.name: e.value for e in importlib.metadata.entry_points(group="console_scripts")}
    assert scripts["tdaot-run"] == "tdaot.tools:run"
    assert scripts["tdaot-lite"] == "tdaot.tools:lite"
    assert scripts["tdaot-rehearse"] == "tdaot.tools:rehearse"


def test_a_command_runs_the_packaged_executable_with_its_arguments(tmp_path):
    binary = tmp_path / "_cpp" / "bin" / "tdaot-lite"
    binary.parent.mkdir(parents=True)
    binary.write_text('#!/bin/sh\necho "$0|$1|$2"\nexit 3\n')
    binary.chmod(0o755)
    done = subprocess.run(
        [sys.executable, "-c", LAUNCH, str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout == f"{binary}|inspect|a package.pt2\n"


def test_a_tool_that_is_not_installed_says_where_it_looked_and_how_to_get_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tools, "package_dirs", lambda: [str(tmp_path)])
    monkeypatch.setattr(tools, "CHECKOUT", tmp_path / "build" / "cpp")
    assert tools.find("tdaot-rehearse") is None
    with pytest.raises(SystemExit) as info:
        tools.rehearse()
    assert info.value.code == 1
    assert capsys.readouterr().err == (
        "tdaot-rehearse: the C++ tool is not installed: not inside the tdaot package "
        f"(_cpp/bin/tdaot-rehearse) nor at {tmp_path / 'build' / 'cpp' / 'tdaot-rehearse'} (built where "
        "CMake finds MuJoCo: pip install mujoco-core==4.0.0, then reinstall tdaot (or, in a checkout, "
        "make cpp))\n"
    )


@pytest.mark.skipif(tools.find("tdaot-lite") is None, reason="no tdaot-lite installed")
def test_the_installed_lite_tool_runs_by_name():
    # The venv's console script (make setup's editable install ships the tools in tdaot/_cpp/bin).
    script = os.path.join(os.path.dirname(sys.executable), "tdaot-lite")
    done = subprocess.run([script, "--help"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "tdaot-lite" in done.stdout and "inspect" in done.stdout
