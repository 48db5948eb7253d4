"""A line per AOTInductor compile appended to the file ``$TDAOT_COMPILE_LOG`` names, when set.

Compiles are what a build (and a test suite) spends its time on. The log counts them across
processes (a CLI build, a ``tdaot build`` job, a test's subprocess), which inductor's own
in-process counters cannot: each line is one ``write`` to a file opened for appending, so
lines from processes compiling side by side do not interleave.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ENV = "TDAOT_COMPILE_LOG"


@dataclass(frozen=True)
class Compile:
    pid: int
    seconds: float
    outcome: str  # "ok" or "failed"
    what: str  # "<module class> <model> <tuning>[ b<batch>][ bound]"


def record(what: str, seconds: float, ok: bool) -> None:
    """Appends one compile to the log, if one is asked for."""
    path = os.environ.get(ENV)
    if not path:
        return
    line = f"{os.getpid()}\t{seconds:.2f}\t{'ok' if ok else 'failed'}\t{what}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read(path: str | os.PathLike) -> list[Compile]:
    """The compiles logged in ``path`` (none when it does not exist)."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    compiles = []
    for line in text.splitlines():
        pid, seconds, outcome, what = line.split("\t", 3)
        compiles.append(Compile(int(pid), float(seconds), outcome, what))
    return compiles


def summary(compiles: list[Compile]) -> str:
    """ "N AOTInductor compiles (F failed), S s": the line a suite prints at its end."""
    failed = sum(c.outcome != "ok" for c in compiles)
    seconds = sum(c.seconds for c in compiles)
    return f"{len(compiles)} AOTInductor compiles ({failed} failed), {seconds:.0f} s"
