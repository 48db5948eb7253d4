"""Where tdaot's caches live, and how a file goes into one (whole or not at all): torch-free, so
the `tdaot` command's build memo (tdaot.build_memo) reaches the folder the artifact cache
(tdaot.builder.cache) uses without importing torch."""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from pathlib import Path


def default_cache_dir() -> Path:
    """``$TDAOT_CACHE_DIR``, else ``$XDG_CACHE_HOME/tdaot``, else ``~/.cache/tdaot``."""
    if os.environ.get("TDAOT_CACHE_DIR"):
        return Path(os.environ["TDAOT_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tdaot"


def write_atomically(path: Path, data: bytes, mode: int = 0o666) -> None:
    """Writes ``data`` beside ``path`` (a new file of ``mode``, less the umask), then renames it
    into place: readers never see half a file."""
    staging = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.replace(staging, path)
    finally:
        if os.path.exists(staging):
            os.unlink(staging)


def copy_atomically(source: Path, destination: Path) -> None:
    """Copy then rename, so readers (other CI jobs sharing the cache) never see half a file."""
    fd, staging = tempfile.mkstemp(dir=destination.parent, prefix=".tdaot-", suffix=".pt2")
    os.close(fd)
    try:
        shutil.copyfile(source, staging)
        os.replace(staging, destination)
    finally:
        if os.path.exists(staging):
            os.unlink(staging)
