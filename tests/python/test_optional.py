"""Optional modules (tdaot.optional): each is carried by an extra of pyproject.toml, and a command
that needs an absent one stops before it does any work, naming the module and the pip line."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest

import tdaot
from tdaot import optional
from tdaot.cli import main as cli

ROOT = Path(__file__).resolve().parents[2]
ENTRIES = [
    optional.MUJOCO,
    optional.MATPLOTLIB,
    optional.PYOPENGL,
    optional.IMAGEIO_FFMPEG,
    optional.ONNX,
    optional.MCAP,
]


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.module)
def test_every_optional_module_is_carried_by_the_extra_it_names(entry):
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert entry.requirement in extras[entry.extra]


@pytest.mark.parametrize(
    ("option", "hidden", "pip"),
    [
        (["--plots", "plots"], "matplotlib", '"matplotlib>=3.8"'),
        (["--video", "out.mp4"], "OpenGL", '"PyOpenGL>=3.1"'),
        (["--reference"], "mujoco", '"mujoco-core>=4,<5"'),
    ],
)
def test_rehearse_refuses_an_option_whose_module_is_absent_before_any_work(
    tmp_path, monkeypatch, capsys, option, hidden, pip
):
    monkeypatch.setitem(sys.modules, hidden, None)  # import machinery: "not installed"
    # The package does not exist: the refusal comes before anything reads it.
    code = cli(["rehearse", str(tmp_path / "absent.pt2"), "--mjcf", str(tmp_path / "absent.xml"), *option])
    err = capsys.readouterr().err
    assert code == 2, err
    # Other modules of the option may be absent too where the extra is not installed.
    names = rf"(\w+, )*{hidden}(, \w+)*"
    assert re.search(rf"tdaot rehearse {option[0]} needs {names}, which (is|are) not installed", err)
    pip_line = rf'pip install "tensordict-aot\[rehearse\]" \(or: pip install [^)]*{re.escape(pip)}'
    assert re.search(pip_line, err)
    assert "absent.pt2" not in err


def test_require_names_every_absent_module_and_one_pip_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "mujoco", None)
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(tdaot.MissingDependencyError) as raised:
        optional.require("a command", optional.MUJOCO, optional.ONNX)
    assert str(raised.value) == (
        "a command needs mujoco, onnx, which are not installed: "
        'pip install "tensordict-aot[rehearse,deploy]" '
        '(or: pip install "mujoco-core>=4,<5" "onnx>=1.16")'
    )
    assert raised.value.modules == "mujoco, onnx"
    assert isinstance(raised.value, ImportError) and isinstance(raised.value, tdaot.UsageError)
