"""Which models of a package run on the lite runtime (``tdaot::lite``, no libtorch), read from
their libraries' ELF files when the package is written.

A bound model is compiled with ``aot_inductor.link_libtorch = False`` (tdaot.builder.tuning):
what its library needs from the process that loads it is the set of undefined symbols of its
dynamic symbol table. Those versioned by the C and C++ runtime (``GLIBC_*``, ``GLIBCXX_*``,
``CXXABI_*``, ``GCC_*``: libc, libm, libstdc++, libgcc_s, ld-linux) are left out, as are weak
references (the toolchain's ``__gmon_start__``, ``_ITM_*``: null when absent); everything
else is a need: torch's C shim (``aoti_torch_*``), SLEEF's vector math, OpenMP's ``GOMP_*``.
A model runs on the lite runtime when it is bound (the minimal array-ref entry point the lite
runtime calls), links no libtorch, and every need is ``lite_symbols.provided``.

This reads ELF files with pyelftools, not ``nm`` text; it decides nothing about the full
runtime, which serves every model.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Iterable

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from tdaot.builder.lite_symbols import provided
from tdaot.builder.tuning import BOUND_MAX_BATCH
from tdaot.errors import BuildError, LiteWarning
from tdaot.manifest import LiteSupport, Manifest, ModelSpec

# Symbol versions of the C and C++ runtime, which every host has.
SYSTEM_VERSIONS = ("GLIBC_", "GLIBCXX_", "CXXABI_", "GCC_")
# Libraries a lite model must not be linked against.
LIBTORCH_LIBRARIES = ("libtorch", "libc10")
PROXY_EXECUTOR = "aoti_torch_proxy_executor_call_function"
# How many of the symbols a model lacks its record lists.
MAX_MISSING = 8
_ATEN_PREFIX = "aoti_torch_cpu_"


def _elf(data: bytes, what: str) -> ELFFile:
    try:
        return ELFFile(io.BytesIO(data))
    except ELFError as err:
        raise BuildError(f"{what} is not an ELF shared library: {err}") from None


def undefined_symbols(data: bytes, what: str = "the model library") -> list[str]:
    """The sorted dynamic symbols the ELF shared library ``data`` needs from the process,
    without the C and C++ runtime's (versioned GLIBC_*, GLIBCXX_*, CXXABI_*, GCC_*) and
    without weak references."""
    elf = _elf(data, what)
    dynsym = elf.get_section_by_name(".dynsym")
    if dynsym is None:
        return []
    versym = elf.get_section_by_name(".gnu.version")
    verneed = elf.get_section_by_name(".gnu.version_r")
    versions: dict[int, str] = {}
    if verneed is not None:
        for _, auxiliaries in verneed.iter_versions():
            for aux in auxiliaries:
                versions[aux["vna_other"]] = aux.name
    needs = set()
    for index, symbol in enumerate(dynsym.iter_symbols()):
        if not symbol.name or symbol["st_shndx"] != "SHN_UNDEF" or symbol["st_info"]["bind"] == "STB_WEAK":
            continue
        version = None
        if versym is not None:
            ndx = versym.get_symbol(index)["ndx"]
            if isinstance(ndx, int):
                version = versions.get(ndx & 0x7FFF)
        if version is not None and version.startswith(SYSTEM_VERSIONS):
            continue
        needs.add(symbol.name)
    return sorted(needs)


def needed_libraries(data: bytes, what: str = "the model library") -> list[str]:
    """The DT_NEEDED entries of the ELF shared library ``data``, in order."""
    dynamic = _elf(data, what).get_section_by_name(".dynamic")
    if dynamic is None:
        return []
    return [tag.needed for tag in dynamic.iter_tags() if tag.entry.d_tag == "DT_NEEDED"]


def operator_of(symbol: str) -> str | None:
    """The ATen operator a shim symbol calls (``aoti_torch_cpu_addmm_out`` -> ``addmm``), or None
    for a symbol that is not an operator's."""
    if not symbol.startswith(_ATEN_PREFIX):
        return None
    name = symbol[len(_ATEN_PREFIX) :]
    import torch  # the build side has it; the overload is the longest suffix torch knows

    parts = name.split("_")
    for cut in range(len(parts), 0, -1):
        op, overload = "_".join(parts[:cut]), "_".join(parts[cut:])
        if not op:
            continue
        packet = getattr(torch.ops.aten, op, None)
        if packet is not None and (not overload or overload in packet.overloads()):
            return op
    return name[: -len("_out")] if name.endswith("_out") else name


def _lacking(missing: list[str]) -> list[str]:
    """What the lite runtime lacks, in words (one part per kind)."""
    parts = []
    if PROXY_EXECUTOR in missing:
        parts.append(f"calls operators through AOTInductor's proxy executor ({PROXY_EXECUTOR})")
    aten = [s for s in missing if operator_of(s) is not None]
    others = [s for s in missing if s != PROXY_EXECUTOR and s not in aten]
    shown = [f"{s} (ATen {operator_of(s)})" for s in aten[:3]] + others[: max(0, 3 - len(aten))]
    rest = len(aten) + len(others) - len(shown)
    if shown:
        parts.append("needs libtorch: " + ", ".join(shown) + (f" and {rest} more" if rest > 0 else ""))
    return parts


def _not_bound(spec: ModelSpec) -> str:
    if spec.tuning == "throughput":
        return "dynamic-batch throughput model: not built for the bound run"
    if spec.batch.dynamic:
        return "dynamic-batch latency model: not built for the bound run"
    if spec.batch.max > BOUND_MAX_BATCH:
        return f"batch-{spec.batch.max} model: the bound run is built for batches up to {BOUND_MAX_BATCH}"
    return f"batch-{spec.batch.max} model: not built for the bound run (its array-ref build refused)"


def support(libraries: Iterable[bytes], spec: ModelSpec, bound: bool) -> LiteSupport:
    """Whether the model ``spec``, of the ELF ``libraries`` (its .so files), runs on the lite
    runtime; ``bound``: whether it was built for the bound run."""
    libraries = list(libraries)
    what = f"the library of model {spec.name!r}"
    needs = sorted({s for data in libraries for s in undefined_symbols(data, what)})
    linked = [
        lib
        for data in libraries
        for lib in needed_libraries(data, what)
        if lib.startswith(LIBTORCH_LIBRARIES)
    ]
    lacking = [s for s in needs if not provided(s)]
    reasons = [] if bound else [_not_bound(spec)]
    if not libraries:
        reasons.append("no model library in the package")
    if linked:
        reasons.append(f"links {', '.join(linked)}")
    reasons += _lacking(lacking)
    if not reasons:
        return LiteSupport(runs=True, needs=tuple(needs))
    return LiteSupport(
        runs=False, needs=tuple(needs), missing=tuple(lacking[:MAX_MISSING]), why="; ".join(reasons)
    )


def check(manifest: Manifest, require: bool, stacklevel: int = 2) -> None:
    """With ``require`` (the ``require_lite`` option), a BuildError unless every specialised
    (latency) model of ``manifest`` runs on the lite runtime; without, a LiteWarning for each
    one that does not. The throughput model is never at fault."""
    what = manifest.source.module_class
    latency = [m for m in manifest.models if m.tuning == "latency"]
    if require and not latency:
        raise BuildError(no_specialised_model(what))
    failing = [m for m in latency if m.lite is None or not m.lite.runs]
    if not failing:
        return
    lines = [_failing(m) for m in failing]
    if require:
        raise BuildError(f"require_lite: {what} has models the lite runtime cannot run: " + "; ".join(lines))
    for line in lines:
        warnings.warn(
            f"{what}: {line}; it needs libtorch (the full runtime)", LiteWarning, stacklevel=stacklevel
        )


def runnable_cross_models(manifest: Manifest, stacklevel: int = 5) -> set[str]:
    """The models of a package for another architecture (``cpu_target="aarch64"``) that run on
    its lite runtime, the only runtime there; a LiteWarning naming each other one and why (it is
    left out of the package), a BuildError naming them all when none runs."""
    what = manifest.source.module_class
    runs = {m.name for m in manifest.models if m.lite is not None and m.lite.runs}
    failing = [m for m in manifest.models if m.name not in runs]
    if failing and not runs:
        raise BuildError(
            f"cpu_target {manifest.cpu_target!r}: no model of {what} runs on the {manifest.architecture} "
            "lite runtime, the only runtime there: " + "; ".join(_failing(m) for m in failing)
        )
    for model in failing:
        warnings.warn(
            f"{what}: {_failing(model)}; it is left out of the {manifest.architecture} package",
            LiteWarning,
            stacklevel=stacklevel,
        )
    return runs


def no_specialised_model(what: str) -> str:
    return (
        f"require_lite: the package of {what} has no specialised model for the lite runtime to run "
        "(only the dynamic-batch throughput model, which needs libtorch); build with tuning='auto' "
        f"on CPU, or a static batch of at most {BOUND_MAX_BATCH}"
    )


def _failing(model: ModelSpec) -> str:
    batch = f"{model.batch.min}..{model.batch.max}" if model.batch.dynamic else str(model.batch.min)
    if model.lite is None:
        return f"model {model.name!r} (batch {batch}) has no lite record"
    lacks = f" (lacks {', '.join(model.lite.missing)})" if model.lite.missing else ""
    return f"model {model.name!r} (batch {batch}) does not run on the lite runtime: {model.lite.why}{lacks}"
