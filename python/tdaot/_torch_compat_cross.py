"""Inductor generating and compiling CPU kernels for another architecture than the build host's:
the private torch API tdaot uses for it, beside tdaot._torch_compat (which re-exports it). Same
rule as there: every use of torch internals for this lives here, and
tests/python/test_torch_compat.py checks each entry.

Inductor picks its vector ISA from ``platform.machine()`` of the compiling host and probes it by
compiling and loading a library; AOTInductor compiles natively only (pytorch/pytorch#153697). For
64-bit ARM on an x86 host tdaot therefore sets inductor's ISA to ``VecNEON`` without a probe (the
build host cannot load an aarch64 library), names the cross compiler as inductor's C++ compiler
(tdaot.builder.targets), and puts a folder of its own first on each compile's include path
(tdaot.builder.cross: Debian's arm64 SLEEF header, in place of the x86 one torch bundles).
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Iterator

from tdaot._torch_compat_paths import compile_commands_run_by

# inductor's name for each vector ISA class tdaot cross-compiles for.
CROSS_ISAS = {"VecNEON": "asimd"}


@contextlib.contextmanager
def vector_isa_set_to(class_name: str) -> Iterator[None]:
    """Inductor's one valid CPU vector ISA is ``class_name`` ("VecNEON") for the duration, taken
    as working without inductor's probe (which loads a library built for it: impossible on a
    host of another architecture)."""
    import torch._inductor.config
    from torch._inductor import cpu_vec_isa

    isa_class = getattr(cpu_vec_isa, class_name, None)
    if isa_class is None:
        import torch

        raise RuntimeError(f"torch {torch.__version__}'s inductor has no vector ISA {class_name}")
    isa = isa_class()
    original = cpu_vec_isa.valid_vec_isa_list
    cpu_vec_isa.valid_vec_isa_list = lambda: [isa]
    try:
        with torch._inductor.config.patch({"cpp.vec_isa_ok": True}):
            yield
    finally:
        cpu_vec_isa.valid_vec_isa_list = original


def with_include_first(cmd_line: str, folder: str) -> str:
    """``cmd_line`` (a compiler command) with ``-I folder`` right after the compiler, ahead of
    every include folder inductor names."""
    argv = shlex.split(cmd_line)
    return shlex.join([argv[0], f"-I{folder}", *argv[1:]]) if argv else cmd_line


@contextlib.contextmanager
def compiles_with_include_first(folder: str) -> Iterator[None]:
    """Each C++ command inductor runs searches ``folder`` for headers before any other, for the
    duration. Entered inside tdaot.builder.compiler_cache's routing, so ccache sees the
    command as it runs."""

    def run(cmd_line, cwd, plain):
        plain(with_include_first(cmd_line, folder), cwd)

    with compile_commands_run_by(run):
        yield
