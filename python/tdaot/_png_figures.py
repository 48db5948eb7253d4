"""PNG files drawn with matplotlib's Agg backend (no display), one folder of them: the writer the
flight log's plots (``tdaot log show --plots``) and the rehearsal's (``tdaot rehearse --plots``)
share."""

from __future__ import annotations

import os
from pathlib import Path


class PngFigures:
    """Figures saved as PNG files into ``directory`` (made if needed), each titled ``title``
    (none when empty); ``written`` lists the paths saved, in order; ``plt`` is pyplot."""

    def __init__(self, directory: str | os.PathLike, title: str = "") -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        self.plt = plt
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.title = title
        self.written: list[str] = []

    def save(self, fig, name: str) -> None:
        """Saves ``fig`` as ``name`` in the folder, titled, and closes it."""
        if self.title:
            fig.suptitle(self.title, fontsize=10)
        fig.tight_layout()
        path = self.directory / name
        fig.savefig(path, dpi=90)
        self.plt.close(fig)
        self.written.append(os.fspath(path))
