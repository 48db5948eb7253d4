"""Writes the relocatable bundle of the aarch64 lite runtime (``make lite-aarch64``):
``dist/tdaot-lite-<version>-linux-aarch64.tar.gz`` holding the installed prefix (bin/tdaot-lite,
lib/libtdaot_lite.so, include/, lib/cmake/tdaot) and every arm64 shared library those need beyond
glibc and libstdc++ (Debian's libsleef.so.3), copied from the multiarch folder into lib/.

The bundle unpacks anywhere: each ELF file's RUNPATH must be relative to the file ($ORIGIN), which
is checked here, and the libraries it needs are either the system's C and C++ runtime or in lib/.
The symbol versions they need (at most GLIBC_2.35 / GLIBCXX_3.4.30: JetPack 6, Ubuntu 22.04) are
checked by tests/python/test_aarch64.py. Usage: bundle_aarch64.py PREFIX OUTPUT.tar.gz
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

from elftools.elf.elffile import ELFFile

# The C and C++ runtime every aarch64 Linux has (glibc, libstdc++, libgcc_s).
SYSTEM = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "ld-linux-aarch64.so.1",
          "libstdc++.so.6", "libgcc_s.so.1"}
SEARCH = ("/usr/lib/aarch64-linux-gnu", "/usr/aarch64-linux-gnu/lib")
# Symbols a robot never needs (the dynamic ones stay): about a third of the files' bytes.
STRIP = "aarch64-linux-gnu-strip"


def _dynamic(path: str) -> tuple[list[str], list[str]]:
    """The DT_NEEDED entries and the RUNPATH/RPATH folders of the ELF file ``path``."""
    with open(path, "rb") as f:
        dynamic = ELFFile(f).get_section_by_name(".dynamic")
        if dynamic is None:
            return [], []
        needed, paths = [], []
        for tag in dynamic.iter_tags():
            if tag.entry.d_tag == "DT_NEEDED":
                needed.append(tag.needed)
            elif tag.entry.d_tag == "DT_RUNPATH":
                paths += tag.runpath.split(":")
            elif tag.entry.d_tag == "DT_RPATH":
                paths += tag.rpath.split(":")
        return needed, paths


def _is_elf(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def bundle(prefix: str, output: str) -> None:
    name = os.path.basename(output).removesuffix(".tar.gz")
    with tempfile.TemporaryDirectory() as staging:
        root = os.path.join(staging, name)
        shutil.copytree(prefix, root, symlinks=True, ignore=shutil.ignore_patterns(".stamp"))
        lib = os.path.join(root, "lib")
        pending = [os.path.join(d, f) for d, _, files in os.walk(root) for f in files]
        while pending:
            path = pending.pop()
            if os.path.islink(path) or not _is_elf(path):
                continue
            needed, paths = _dynamic(path)
            absolute = [p for p in paths if p and not p.startswith("$ORIGIN")]
            if absolute:
                sys.exit(f"{os.path.relpath(path, root)}: RUNPATH {absolute} is not relative to the file")
            for library in needed:
                if library in SYSTEM or os.path.exists(os.path.join(lib, library)):
                    continue
                source = next((os.path.join(d, library) for d in SEARCH if os.path.exists(os.path.join(d, library))), None)
                if source is None:
                    sys.exit(f"{os.path.relpath(path, root)} needs {library}, found in none of {SEARCH}")
                shutil.copy2(os.path.realpath(source), os.path.join(lib, library))
                pending.append(os.path.join(lib, library))
        strip = shutil.which(STRIP)
        for d, _, files in os.walk(root):
            for f in files:
                path = os.path.join(d, f)
                if strip and not os.path.islink(path) and _is_elf(path):
                    os.chmod(path, os.stat(path).st_mode | 0o200)
                    subprocess.run([strip, "--strip-unneeded", path], check=True)
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        with tarfile.open(output + ".part", "w:gz") as tar:
            tar.add(root, arcname=name)
        os.replace(output + ".part", output)
    print(f"bundle: {output} ({os.path.getsize(output)} bytes)")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    bundle(sys.argv[1], sys.argv[2])
