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
import json
import re
import shlex
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

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


# AOTInductor's wrapper source records each constant as `constants_info_[i].<field> = <value>;`.
_CONSTANT_FIELD = re.compile(r"constants_info_\[(\d+)\]\.(\w+) = (.*?);\n")
_DTYPES = {
    "float32": "float32", "float64": "float64", "float16": "float16", "bfloat16": "bfloat16",
    "int64": "int64", "int32": "int32", "int16": "int16", "int8": "int8", "uint8": "uint8", "bool": "bool",
}  # fmt: skip


def compiled_constants_read(records: dict[str, bytes]) -> dict[str, torch.Tensor]:
    """Every constant of the one CPU model in ``records`` (of a package aoti_compile_and_package
    made) by AOTInductor's internal name, read without loading its library (which may be built
    for another architecture): the wrapper source's ``constants_info_`` records, in the order of
    the library's embedded blob (``_binary_constants_bin_start``: each constant's bytes after the
    previous one's; folded constants are not in it), as the lite runtime reads them in place
    (cpp/src/lite/inplace_constants.cpp). Raises RuntimeError when the records or the blob cannot
    be read or do not add up."""
    import torch

    (source,) = [data for name, data in records.items() if name.endswith(".wrapper.cpp")]
    (library,) = [data for name, data in records.items() if name.endswith(".wrapper.so")]
    entries: dict[int, dict[str, str]] = {}
    for index, field, value in _CONSTANT_FIELD.findall(source.decode()):
        entries.setdefault(int(index), {})[field] = value.strip()
    blob = _constants_blob(library)
    constants, position = {}, 0
    for index in sorted(entries):
        entry = entries[index]
        if entry.get("from_folded") == "true":
            continue
        try:
            name = json.loads(entry["name"])
            dtype = getattr(torch, _DTYPES[entry["dtype"].removeprefix("cached_torch_dtype_")])
            size = int(entry["data_size"])
            shape = [int(x) for x in entry["shape"].strip("{}").split(",") if x.strip()]
            stride = [int(x) for x in entry["stride"].strip("{}").split(",") if x.strip()]
            offset = int(entry.get("offset", "0"))
        except (KeyError, ValueError) as err:
            raise RuntimeError(
                f"constant record {index} of the wrapper source cannot be read: {err!r}"
            ) from None
        data = blob[position : position + size]
        if len(data) != size:
            raise RuntimeError(
                f"constant {name!r} runs past the library's constants blob ({len(blob)} bytes)"
            )
        flat = torch.frombuffer(bytearray(data), dtype=dtype) if size else torch.empty(0, dtype=dtype)
        constants[name] = torch.as_strided(flat, shape, stride, offset).clone()
        position += size
    if position != len(blob) and not (position == 0 and len(blob) <= 1):
        raise RuntimeError(
            f"the recorded constants ({position} bytes) do not add up to the blob ({len(blob)} bytes)"
        )
    return constants


def _constants_blob(library: bytes) -> bytes:
    """The bytes between the library's ``_binary_constants_bin_start`` and ``_end`` symbols."""
    import io

    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(library))
    symbols = {}
    for table in (elf.get_section_by_name(".symtab"), elf.get_section_by_name(".dynsym")):
        if table is None:
            continue
        for name in ("_binary_constants_bin_start", "_binary_constants_bin_end"):
            found = table.get_symbol_by_name(name)
            if found and name not in symbols:
                symbols[name] = found[0]["st_value"]
    if len(symbols) != 2:
        raise RuntimeError(
            "the model library has no embedded constants blob (_binary_constants_bin_start/_end)"
        )
    start, end = symbols["_binary_constants_bin_start"], symbols["_binary_constants_bin_end"]
    for section in elf.iter_sections():
        address, size = section["sh_addr"], section["sh_size"]
        if address <= start and end <= address + size and section["sh_type"] != "SHT_NOBITS":
            offset = section["sh_offset"] + start - address
            return library[offset : offset + end - start]
    raise RuntimeError("the model library's constants blob lies in no section with data")
