"""``tdaot-rehearse`` from Python: where the tool is, one run of it, and its trajectory file."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tdaot.errors import CliError

ENV = "TDAOT_REHEARSE"
TOOL = "tdaot-rehearse"
# A source checkout's build (make cpp); the tool is built where CMake finds MuJoCo.
CHECKOUT = Path(__file__).resolve().parents[3] / "build" / "cpp" / TOOL


class RehearsalError(CliError):
    """The rehearsal could not run: the tool's own message (exit code 2 for a package, contract,
    robot or option it refuses, 1 for a package it could not read or run); ``returncode``."""

    def __init__(self, message: str, returncode: int = 2):
        super().__init__(message)
        self.returncode = returncode
        self.exit_code = 2 if returncode == 2 else 1


@dataclass(frozen=True)
class Rehearsal:
    """One ``tdaot-rehearse`` run: its summary (the tool's JSON line), what it printed, and the
    trajectory file it wrote."""

    summary: dict
    stdout: str
    trajectory: str


def find_tool() -> str:
    """The path of ``tdaot-rehearse``: ``$TDAOT_REHEARSE``, else the one inside the installed
    tdaot package (the wheel's, or the editable install's: tdaot.tools), else on PATH, else the
    checkout's build; RehearsalError saying how to get it when there is none."""
    from tdaot import tools

    given = os.environ.get(ENV)
    if given and not os.access(given, os.X_OK):
        raise RehearsalError(f"{ENV}={given!r} is not an executable file")
    found = given or tools.find(TOOL) or shutil.which(TOOL)
    if found is None:
        raise RehearsalError(
            f"{TOOL} was not found: not in ${ENV}, not inside the tdaot package ({tools.PACKAGED / TOOL}), "
            f"not on PATH, not at {CHECKOUT}. It is built where CMake finds MuJoCo: pip install "
            "mujoco-core==4.0.0, then reinstall tdaot (in a checkout: make cpp)"
        )
    return found


def run(
    package: str | os.PathLike,
    mjcf: str | os.PathLike,
    trajectory: str | os.PathLike,
    args: Sequence[str] = (),
    tool: str | None = None,
) -> Rehearsal:
    """Runs ``tdaot-rehearse PACKAGE --mjcf MJCF --trajectory TRAJECTORY --json ARGS...``;
    RehearsalError with the tool's message when it exits non-zero."""
    command = [tool or find_tool(), os.fspath(package), "--mjcf", os.fspath(mjcf)]
    command += ["--trajectory", os.fspath(trajectory), "--json", *args]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        message = done.stderr.strip().removeprefix("tdaot-rehearse: ") or f"exit code {done.returncode}"
        raise RehearsalError(message, 2 if done.returncode == 2 else 1)
    lines = done.stdout.strip().splitlines()
    return Rehearsal(json.loads(lines[-1]), "\n".join(lines[:-1]) + "\n", os.fspath(trajectory))


#: The trajectory's columns of text: the supervisor's state by name (running, blending, held,
#: damped; none without a supervisor).
TEXT_COLUMNS = ("supervisor",)


def read_trajectory(path: str | os.PathLike) -> list[dict[str, float | str]]:
    """The rows of a ``--trajectory`` file, every column a float but the supervisor's state."""
    with open(path, newline="") as file:
        return [
            {name: value if name in TEXT_COLUMNS else float(value) for name, value in row.items()}
            for row in csv.DictReader(file)
        ]
