"""The build memo: `tdaot build FACTORY -o OUT` run again with nothing changed replays its last
result without importing torch.

The artifact cache (tdaot.builder.cache) is keyed by the exported program, so even a hit pays for
importing torch and tensordict and for the export: 4-6 s in a new process. The memo sits in front
of it, for the command line only. A build records what it depended on, and the next identical
command checks those things alone (a stat each) and, when none changed, copies the files the build
wrote back into place and prints what it printed:

- the command: its arguments, working folder, Python, and environment (volatile shell variables
  aside);
- every module loaded (the factory's file, the user's modules, torch, tdaot itself: an editable
  checkout's edits count), by path, size, modification time and inode;
- every file the build opened to read from Python (a checkpoint through torch.load, a YAML file,
  a contract) and every folder it listed (a new checkpoint in a run folder), likewise.

A file written during the build is an output, not an input. What the memo cannot see: a file read
by native code (safetensors, torch.jit.load: Python never opens it), and a factory whose result
changes with nothing above changing (an unseeded numpy generator, the clock). `--no-cache` builds
anew and records nothing. Entries live in the artifact cache's folder, under ``memo/``.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from pathlib import Path

from tdaot.cache_folder import copy_atomically, default_cache_dir, write_atomically

FORMAT = 1
# Shell and session variables that change between two runs of one command without changing it.
_VOLATILE_ENV = {"_", "OLDPWD", "PWD", "SHLVL", "COLUMNS", "LINES", "TERM", "PS1", "PYTEST_CURRENT_TEST"}
_SYSTEM_PREFIXES = ("/proc/", "/sys/", "/dev/")


def memo_dir(argv: list[str]) -> Path:
    """``--cache-dir DIR``'s memo folder when given, else the default cache folder's."""
    for i, arg in enumerate(argv):
        if arg == "--cache-dir" and i + 1 < len(argv):
            return Path(argv[i + 1]) / "memo"
        if arg.startswith("--cache-dir="):
            return Path(arg.split("=", 1)[1]) / "memo"
    return default_cache_dir() / "memo"


def applies(argv: list[str]) -> bool:
    """A single build that may be memoised: not a config build, not --no-cache, not --help."""
    refused = {"--no-cache", "--config", "-h", "--help"}
    return bool(argv) and argv[0] == "build" and not any(a.split("=", 1)[0] in refused for a in argv)


def command_key(argv: list[str]) -> str:
    env = {k: v for k, v in os.environ.items() if k not in _VOLATILE_ENV}
    command = {
        "format": FORMAT,
        "argv": argv,
        "cwd": os.getcwd(),
        "python": sys.executable,
        "version": sys.version,
        "env": env,
    }
    return hashlib.sha256(json.dumps(command, sort_keys=True).encode()).hexdigest()


def _signature(path: str) -> list | None:
    """What a stat says of ``path``: a file's size, modification time and inode; a folder's
    sorted entry names (hashed); None when it is gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if stat.S_ISDIR(st.st_mode):
        try:
            names = sorted(os.listdir(path))
        except OSError:
            return None
        return ["dir", hashlib.sha256("\0".join(names).encode()).hexdigest()]
    return ["file", st.st_size, st.st_mtime_ns, st.st_ino]


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


class Recorder:
    """Collects, through an audit hook, the files a build reads and writes and the folders it
    lists; ``built`` stores the memo entry once the build succeeded."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.key = command_key(argv)  # now: the build itself sets variables (torch, inductor)
        self.read: set[str] = set()
        self.listed: set[str] = set()
        self.written: set[str] = set()
        self.active = True
        sys.addaudithook(self._hook)  # for the life of the process: this one command

    def _hook(self, event: str, args: tuple) -> None:
        if not self.active:
            return
        if event == "open":
            path, mode, flags = (args + (None, None))[:3]
            if isinstance(path, int) or path is None:
                return
            path = os.path.abspath(os.fsdecode(path))
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
            )
            (self.written if writing else self.read).add(path)
        elif event in ("os.listdir", "os.scandir") and args and isinstance(args[0], (str, bytes)):
            self.listed.add(os.path.abspath(os.fsdecode(args[0])))
        elif event in ("os.rename", "shutil.move") and len(args) >= 2:
            self.written.add(os.path.abspath(os.fsdecode(args[1])))

    def built(self, outputs: list[str], printed: str) -> None:
        """Store the memo entry: ``outputs`` (the files the build produced, copied into the memo)
        and ``printed`` (what `tdaot build` printed, for the replay). A memo that cannot be
        written (a read-only cache folder, a full disk) is said on stderr; the build stands."""
        self.active = False  # the sets are final (other threads no longer add to them)
        try:
            self._store(memo_dir(self.argv), outputs, printed)
        except OSError as err:
            print(f"tdaot build: the build memo was not written ({err}); the build stands", file=sys.stderr)

    def _store(self, directory: Path, outputs: list[str], printed: str) -> None:
        outputs = [os.path.abspath(p) for p in outputs]
        skip = set(outputs) | self.written
        modules = {getattr(m, "__file__", None) for m in list(sys.modules.values())}
        ignored = (*_SYSTEM_PREFIXES, str(directory))
        inputs = {p for p in (modules | self.read | self.listed) - skip if p and not p.startswith(ignored)}
        depends = {path: _signature(path) for path in sorted(inputs)}
        depends = {path: sig for path, sig in depends.items() if sig is not None}  # temporary files
        blobs = directory / "blobs"
        blobs.mkdir(parents=True, exist_ok=True)
        files = []
        for path in outputs:
            digest = _sha256(Path(path))
            if not (blobs / digest).is_file():
                copy_atomically(Path(path), blobs / digest)
            files.append([path, digest])
        entry = {"format": FORMAT, "argv": self.argv, "depends": depends, "outputs": files}
        entry["printed"] = printed
        write_atomically(directory / f"{self.key}.json", json.dumps(entry).encode())


def replay(argv: list[str]) -> str | None:
    """When the memo holds this command and nothing it depended on changed: its outputs copied
    back into place, and what it printed (returned); else None. An unreadable or damaged entry,
    or an output that cannot be written, is a miss: the build then runs and says what is wrong."""
    try:
        return _replay(memo_dir(argv), argv)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _replay(directory: Path, argv: list[str]) -> str | None:
    entry = json.loads((directory / f"{command_key(argv)}.json").read_text())
    if entry.get("format") != FORMAT or entry.get("argv") != argv:
        return None
    for path, signature in entry["depends"].items():
        if _signature(path) != signature:
            return None
    blobs = directory / "blobs"
    for _path, digest in entry["outputs"]:
        if _sha256(blobs / digest) != digest:
            return None  # a damaged memo: build anew
    for path, digest in entry["outputs"]:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        copy_atomically(blobs / digest, Path(path))
    return str(entry["printed"])
