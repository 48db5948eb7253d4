"""Inductor's C++ compiles routed through ccache, so that a source compiled once with a command
and a compiler is not compiled again on this machine, and the package's bytes stay the ones a build
without ccache makes.

A build spends about two thirds of its compile in g++, and most of that on the model's wrapper.
The same policy built again (a test suite, a CI job, another option that changes only the
manifest) compiles the same sources with the same command: inductor's file names and tdaot's
fixed build folder (inductor_dir) make them the same text on every run. Only compiles of a C++
source to an object (``-c``) go through ccache; links and header steps run as they are.

Two things keep ccache's results exact:

- The wrapper is compiled with a precompiled header (inductor's ``-include H`` with ``H.gch``
  beside it). ccache caches that only by adding ``-fpch-preprocess``, which gcc records in the
  object's debug information (DW_AT_producer): other bytes than a build without ccache. So ccache
  is given a copy of H with no ``.gch`` beside it (it hashes the header's text and every file it
  includes), and its prefix command swaps the original H back in for the compile itself: the
  object is the one gcc makes with the precompiled header, as without ccache.
- ccache 4.7 hashes ``-march=native`` as text, so an object made on one CPU would be served on
  another. The compiler's expansion of it (``-Q --help=target``) joins ccache's hash as an
  extra file (for any ``-m...=native``).

ccache's own settings that would change the object are overridden for these calls (base_dir,
hash_dir, run_second_cpp, sloppiness). A failed ccache run is run again without it, so a broken ccache never
fails a build (a real compile error comes from that second run). On where ``ccache`` is on PATH;
``TDAOT_CCACHE=0`` turns it off.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

from tdaot._torch_compat_paths import compile_commands_run_by
from tdaot.builder.inductor_dir import BUILD_CACHE_DIR, private_dir
from tdaot.cache_folder import write_atomically

ENV = "TDAOT_CCACHE"

# ccache's prefix command (CCACHE_PREFIX) when ccache hashed a copy of the precompiled header:
# the compiler runs with the original, whose .gch gcc then uses.
_RESTORE_SCRIPT = """#!/bin/sh
# Written by tdaot (tdaot/builder/compiler_cache.py): ccache's prefix command, which gives the
# compiler the precompiled header in place of the copy ccache hashed.
for arg do
  shift
  if [ "$arg" = "$TDAOT_PCH_COPY" ]; then set -- "$@" "$TDAOT_PCH_HEADER"; else set -- "$@" "$arg"; fi
done
exec "$@"
"""


def ccache_program() -> str | None:
    """The ccache inductor's compiles go through, or None (not on PATH, or ``TDAOT_CCACHE=0``)."""
    if os.environ.get(ENV, "").strip().lower() in {"0", "off", "false", "no"}:
        return None
    return shutil.which("ccache")


@contextlib.contextmanager
def compiles_through_ccache(root: str = BUILD_CACHE_DIR) -> Iterator[None]:
    """Inductor's compiles of C++ sources go through ccache for the duration (module docstring);
    with no ccache, or no private folder at ``root`` for its files, they run as they are."""
    ccache = ccache_program()
    if ccache is None or not hasattr(os, "getuid") or private_dir(root) is not None:
        yield
        return
    with compile_commands_run_by(functools.partial(_run, ccache, root)):
        yield


def _run(ccache: str, root: str, cmd_line: str, cwd: str, plain: Callable[[str, str], None]) -> None:
    routed = ccache_command(ccache, shlex.split(cmd_line), root)
    if routed is not None:
        argv, env = routed
        done = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if done.returncode == 0:
            return
    plain(cmd_line, cwd)  # not a compile ccache takes, or it failed: inductor's own run and error


def ccache_command(ccache: str, argv: list[str], root: str) -> tuple[list[str], dict] | None:
    """The ccache command and environment that compile as ``argv`` does, or None when ``argv`` is
    not a compile of a C++ source to an object."""
    if "-c" not in argv or not any(arg.endswith(".cpp") for arg in argv):
        return None
    argv, env = list(argv), dict(os.environ)
    env.pop("CCACHE_NOHASHDIR", None)
    # Objects carry the compile's folder and paths (-g): ccache must neither rewrite the paths
    # (base_dir) nor serve an object made in another folder (hash_dir), must compile the source
    # itself, not its preprocessed text (run_second_cpp), and must hash all it reads (no
    # sloppiness: `make` sets some for the project's own C++).
    env.update(CCACHE_BASEDIR="", CCACHE_HASHDIR="1", CCACHE_CPP2="1", CCACHE_SLOPPINESS="")
    for i, arg in enumerate(argv[:-1]):
        if arg == "-include" and os.path.exists(argv[i + 1] + ".gch"):
            header, argv[i + 1] = argv[i + 1], _header_copy(argv[i + 1], root)
            prefix = [_restore_script(root), env.get("CCACHE_PREFIX", "")]
            env.update(CCACHE_PREFIX=" ".join(filter(None, prefix)), TDAOT_PCH_COPY=argv[i + 1])
            env["TDAOT_PCH_HEADER"] = header
            break
    if any(arg.startswith("-m") and arg.endswith("=native") for arg in argv):
        meaning = _native_meaning(argv[0])
        if meaning is None:
            return None  # no way to tell this CPU's objects from another's
        native = os.path.join(root, "native-target-" + hashlib.sha256(meaning).hexdigest()[:16] + ".txt")
        extra = [env.get("CCACHE_EXTRAFILES"), _written(native, meaning, 0o600)]
        env["CCACHE_EXTRAFILES"] = os.pathsep.join(filter(None, extra))
    return [ccache, *argv], env


def _header_copy(header: str, root: str) -> str:
    """A copy of ``header`` in ``root``/pch-free, where no precompiled header lies beside it."""
    with open(header, "rb") as f:
        text = f.read()
    return _written(os.path.join(root, "pch-free", os.path.basename(header)), text, 0o600)


def _restore_script(root: str) -> str:
    return _written(os.path.join(root, "ccache-pch-restore.sh"), _RESTORE_SCRIPT.encode(), 0o700)


@functools.cache
def _native_meaning(compiler: str) -> bytes | None:
    """What ``-march=native`` means to ``compiler`` on this CPU (None when it does not say)."""
    try:
        done = subprocess.run([compiler, "-march=native", "-Q", "--help=target"], capture_output=True)
    except OSError:
        return None
    return done.stdout if done.returncode == 0 and done.stdout else None


def _written(path: str, data: bytes, mode: int) -> str:
    """``path`` holding ``data`` (written atomically when it does not already)."""
    try:
        with open(path, "rb") as f:
            if f.read() == data:
                return path
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    write_atomically(Path(path), data, mode)
    return path
