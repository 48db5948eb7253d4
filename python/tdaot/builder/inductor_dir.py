"""The one inductor cache path every build compiles in, so a package's bytes depend on what is
built and never on where inductor's cache is.

Inductor writes a model's kernel sources into its cache directory and embeds that directory
in them (comments, the include of its ``cpp_prefix.h``), names their files after a hash of the
sources, and the libraries it links carry those names: two builds of one policy from two
``TORCHINDUCTOR_CACHE_DIR`` values (the default is ``/tmp/torchinductor_$USER``: one per user)
gave two packages. tdaot compiles every model with inductor's cache pointed at a folder of
:data:`BUILD_CACHE_DIR` named after the model's cache key, for the duration of its compile
(``TORCHINDUCTOR_CACHE_DIR`` restored after): a path that depends on what is built and on no
user, setting or process, so the same policy, options and torch give the same sha256 on every
machine. One folder per model also keeps two processes apart (two compiles of one graph into one
cache once read a half-written library): a lock beside the folder makes a second compile of the
same model wait for the first, and the folder is removed after the compile (the package holds
what it made; the artifact cache keeps the model).

The directory is private: created with mode 0700 and used only when it is a real directory (not
a symbolic link) owned by this user and closed to others, since inductor loads the libraries it
finds in its cache. Where it is not (another user on this machine made it first), the build
compiles in inductor's own cache and says, with a :class:`~tdaot.errors.ReproducibilityWarning`,
that its bytes depend on that path.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import warnings
from collections.abc import Iterator

from tdaot._torch_compat_paths import inductor_cache_at, inductor_cache_dir, torch_at
from tdaot.errors import ReproducibilityWarning

# Not tempfile.gettempdir(): TMPDIR differs between users and CI runners.
BUILD_CACHE_DIR = "/tmp/tdaot-inductor"


def private_dir(path: str) -> str | None:
    """Why ``path`` cannot be the private build cache, or None when it can (created if absent)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as err:
        return f"it cannot be created ({err.strerror})"
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        return "it is not a directory"
    if info.st_uid != os.getuid():
        return f"it belongs to another user (uid {info.st_uid})"
    if info.st_mode & 0o077:
        return f"others may write or read it (mode {stat.S_IMODE(info.st_mode):o}, expected 700)"
    return None


@contextlib.contextmanager
def build_cache_dir(
    key: str, root: str = BUILD_CACHE_DIR, move_torch: bool = True, move_cache: bool = True
) -> Iterator[str]:
    """Inductor's cache at ``root``/``key`` (a model's cache key) for the duration (see the
    module's docstring); yields the directory the compile used. ``move_torch``: the compile
    commands name torch through ``root``'s link; ``move_cache``: inductor's cache can be moved
    at all (the patches ``torch_at`` and ``inductor_cache_at``, tdaot.builder.patches; without
    the second, inductor compiles in its own cache, where this torch puts it: "" is yielded, and
    the build has said so)."""
    if not move_cache:
        yield ""
        return
    refusal = private_dir(root) if hasattr(os, "getuid") else "this platform has no file owners"
    if refusal is not None:
        own = inductor_cache_dir()
        warnings.warn(
            f"tdaot compiles in {root!r} so that a package's bytes do not depend on the cache path, "
            f"but {refusal}; compiling in inductor's cache {own!r} instead, whose path the package's "
            "bytes will carry",
            ReproducibilityWarning,
            stacklevel=2,
        )
        yield own
        return
    folder = os.path.join(root, key[:32])
    with open(folder + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            shutil.rmtree(folder, ignore_errors=True)  # a crashed build's leftovers
            os.mkdir(folder, 0o700)
            with (
                inductor_cache_at(folder),
                torch_at(_torch_link(root)) if move_torch else contextlib.nullcontext(),
            ):
                yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)
            fcntl.flock(lock, fcntl.LOCK_UN)


def _torch_link(root: str) -> str:
    """``root``/torch-VERSION, a symbolic link to the torch package: the compiler then reads torch's
    headers and libraries at a path that depends on the torch version alone, not on where the
    venv is (inductor hashes the compile command, with its ``-I`` paths, into the names of the
    files it packages, and the headers' ``__FILE__`` strings reach the library)."""
    import torch

    target = os.path.dirname(os.path.abspath(torch.__file__))
    link = os.path.join(root, "torch-" + torch.__version__.replace(os.sep, "_"))
    if os.path.islink(link) and os.readlink(link) == target:
        return link
    staging = f"{link}.{os.getpid()}"
    os.symlink(target, staging)
    os.replace(staging, link)  # another venv of the same torch may point it at its own copy
    return link
