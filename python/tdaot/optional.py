"""The optional Python modules a command needs, checked before it does any work.

tdaot's required dependencies build and run packages; a few commands need more (MuJoCo's
bindings, matplotlib, PyOpenGL, ONNX, mcap), which pip installs through the distribution's extras
(``pyproject.toml`` ``[project.optional-dependencies]``). :func:`require` finds the modules
without importing them and refuses by name with the pip line that installs them, so a command
does not stop half-way (after a minute of simulation) on a ModuleNotFoundError. Torch-free.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from tdaot.errors import MissingDependencyError

DISTRIBUTION = "tensordict-aot"


@dataclass(frozen=True)
class Optional:
    """An optional module: its import name, the requirement that provides it, the extra that
    carries that requirement."""

    module: str
    requirement: str
    extra: str


# One entry per optional module; the requirements are the extras' own (pyproject.toml).
MUJOCO = Optional("mujoco", "mujoco-core>=4,<5", "rehearse")
MATPLOTLIB = Optional("matplotlib", "matplotlib>=3.8", "rehearse")
PYOPENGL = Optional("OpenGL", "PyOpenGL>=3.1", "rehearse")
IMAGEIO_FFMPEG = Optional("imageio_ffmpeg", "imageio-ffmpeg>=0.5", "rehearse")
ONNX = Optional("onnx", "onnx>=1.16", "deploy")
MCAP = Optional("mcap", "mcap>=1.1,<2", "log")


def missing(*needed: Optional) -> list[Optional]:
    """The modules of ``needed`` that cannot be imported here (found without importing them)."""
    absent = []
    for entry in needed:
        try:
            found = importlib.util.find_spec(entry.module) is not None
        except (ImportError, ValueError):  # a broken or half-installed package
            found = False
        if not found:
            absent.append(entry)
    return absent


def pip_line(entries: list[Optional]) -> str:
    """The pip command that installs ``entries``: the extras that carry them."""
    extras = ",".join(dict.fromkeys(e.extra for e in entries))
    requirements = " ".join(f'"{e.requirement}"' for e in entries)
    return f'pip install "{DISTRIBUTION}[{extras}]" (or: pip install {requirements})'


def require(what: str, *needed: Optional) -> None:
    """Raises MissingDependencyError naming ``what`` (the command or option), each absent module
    and the pip line, when any module of ``needed`` is absent."""
    absent = missing(*needed)
    if absent:
        names = ", ".join(e.module for e in absent)
        verb = "is" if len(absent) == 1 else "are"
        raise MissingDependencyError(
            f"{what} needs {names}, which {verb} not installed: {pip_line(absent)}", names
        )
