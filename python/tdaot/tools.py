"""The C++ tools as commands: ``tdaot-run``, ``tdaot-lite`` and ``tdaot-rehearse`` (the wheel's
console scripts) run the executables the wheel ships inside the tdaot package
(``tdaot/_cpp/bin``, which the editable install of a checkout fills too), else a source
checkout's ``build/cpp`` ones, with the command line they were given.

``tdaot-run`` finds libtorch in the torch package beside tdaot (its RPATH), ``tdaot-lite`` needs
no torch, ``tdaot-rehearse`` needs MuJoCo's library from the ``mujoco-core`` wheel: the wheel has
it only where its build found MuJoCo (``pip install mujoco-core==4.0.0`` before tdaot).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

TOOLS = ("tdaot-run", "tdaot-lite", "tdaot-rehearse")
PACKAGED = Path("_cpp") / "bin"
CHECKOUT = Path(__file__).resolve().parents[2] / "build" / "cpp"
_HOW = {
    "tdaot-run": "pip install builds it into the wheel; in a checkout, make cpp",
    "tdaot-lite": "pip install builds it into the wheel; in a checkout, make cpp",
    "tdaot-rehearse": "built where CMake finds MuJoCo: pip install mujoco-core==4.0.0, then reinstall "
    "tdaot (or, in a checkout, make cpp)",
}


def package_dirs() -> list[str]:
    """The tdaot package's directories: its sources, and where its compiled module was installed
    (an editable install keeps the two apart)."""
    import tdaot

    dirs = list(getattr(tdaot, "__path__", []))
    spec = importlib.util.find_spec("tdaot._C")
    if spec is not None and spec.origin:
        dirs.append(os.path.dirname(spec.origin))
    return list(dict.fromkeys(dirs))


def find(tool: str) -> str | None:
    """The executable of ``tool`` (one of TOOLS): the package's, else the checkout's; None when
    there is neither."""
    for candidate in [*(Path(d) / PACKAGED / tool for d in package_dirs()), CHECKOUT / tool]:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return os.fspath(candidate)
    return None


def not_found(tool: str) -> str:
    return (
        f"{tool}: the C++ tool is not installed: not inside the tdaot package ({PACKAGED / tool}) nor at "
        f"{CHECKOUT / tool} ({_HOW[tool]})"
    )


def _exec(tool: str) -> None:
    path = find(tool)
    if path is None:
        print(not_found(tool), file=sys.stderr)
        sys.exit(1)
    os.execv(path, [path, *sys.argv[1:]])


def run() -> None:
    _exec("tdaot-run")


def lite() -> None:
    _exec("tdaot-lite")


def rehearse() -> None:
    _exec("tdaot-rehearse")
