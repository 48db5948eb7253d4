"""Per-artifact status lines for `tdaot build --config`.

On a terminal the lines are redrawn in place with the elapsed time; elsewhere (CI
logs) each status change is one plain line.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

STATUSES = ("queued", "exporting", "compiling", "checking parity", "done", "cached", "failed")
_FINAL = {"done", "cached", "failed"}


class Progress:
    def __init__(self, ids: list[str], stream: TextIO | None = None, live: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.width = max((len(i) for i in ids), default=0)
        now = time.monotonic()
        self.state = {i: ["queued", now, now, ""] for i in ids}  # status, started, last change, detail
        self.started = now
        self._drawn = 0
        if not self.live:
            self.stream.write(f"tdaot: {len(ids)} artifact(s) queued\n")
        self.refresh()

    def update(self, artifact_id: str, status: str, detail: str = "") -> None:
        entry = self.state[artifact_id]
        now = time.monotonic()
        if entry[0] == "queued":
            entry[1] = now  # the clock runs from the first real step, not from queueing
        entry[0], entry[2], entry[3] = status, now, detail
        if self.live:
            self.refresh()
        else:
            self.stream.write(f"{self._line(artifact_id)}\n")
            self.stream.flush()

    def refresh(self) -> None:
        """Redraws the live display (elapsed times move on); a no-op for plain output."""
        if not self.live:
            return
        if self._drawn:
            self.stream.write(f"\x1b[{self._drawn}F")
        for artifact_id in self.state:
            self.stream.write(f"\x1b[2K{self._line(artifact_id)}\n")
        self._drawn = len(self.state)
        self.stream.flush()

    def _line(self, artifact_id: str) -> str:
        status, started, changed, detail = self.state[artifact_id]
        end = changed if status in _FINAL else time.monotonic()
        elapsed = "" if status == "queued" else f"{end - started:6.1f}s"
        text = f"{artifact_id.ljust(self.width)}  {status:<15} {elapsed}"
        return f"{text}  {detail}".rstrip() if detail else text.rstrip()
