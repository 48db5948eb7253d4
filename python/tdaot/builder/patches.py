"""Every patch tdaot applies to torch's internals, and every change to results the build makes
beyond torch's own: the two tables of this module.

A patch replaces or wraps something private in inductor for the duration of a compile (the code
lives in tdaot._torch_compat*, its check of the installed torch in tdaot._torch_compat_checks).
Before a model compiles, each patch that concerns it is checked against the installed torch: the
attributes it reaches for, the parameters of what it wraps, the text it rewrites. One that finds
torch otherwise is left out: the model is built as inductor builds it (slower, or allocating, or
carrying the venv's path, never failing), the build says so once with a ``tdaot.CompatWarning``
naming the patch and the torch version, and the package's manifest lists only the patches that
were in force (``patches``). A new target's patches (a NEON one) are rows of ``PATCHES`` with its
ISA in ``isas``.

``NUMERICS`` names each change to results beyond torch's own computation; the manifest lists the
ones a package's models take (``numerics``), and ``exact_math=True`` builds without any of them.

The artifact cache key of every model holds the patches in force for it and :func:`code_digest`,
the sha256 of the source of the patches, their checks and tdaot's code generation (the modules of
``CODE_MODULES``): editing any of them gives new keys, with no version string to remember.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from tdaot import _torch_compat_checks as checks
from tdaot.builder.targets import CPU_TARGETS
from tdaot.errors import CompatWarning

# Where a patch is in force: every model, a latency model (the C++ GEMM template), a bound one.
EVERY, LATENCY, BOUND = "every", "latency", "bound"
# Models built for this host's architecture, or for another (a cross target: tdaot.builder.cross).
NATIVE, CROSS = "native", "cross"


@dataclass(frozen=True)
class Patch:
    """One patch of torch's internals: its name (tdaot._torch_compat's function), what the build
    loses without it, which models it is in force for (``where``; ``isas``: only those built for
    one of these vector ISAs, as the manifest names them; empty: any), how it changes results from
    torch's own (a name of ``NUMERICS``, or "": it does not) and the text it leaves in a model's
    C++ where it did (``mark``), and its check of the installed torch (None: torch has what it
    needs; else what differs)."""

    name: str
    without: str
    lacks: Callable[[], str | None]
    where: str = EVERY
    isas: tuple[str, ...] = ()
    numerics: str = ""
    mark: str = ""


PATCHES: tuple[Patch, ...] = (
    Patch(
        "vector_isas_limited_to",
        "inductor's vector ISAs are neither probed with libtorch linked nor limited to the CPU target's",
        checks.vector_isa_limit_lacks,
        NATIVE,
    ),
    Patch(
        "vector_isa_set_to",
        "inductor probes this host's vector ISA instead of the cross target's (no cross build)",
        checks.vector_isa_set_lacks,
        CROSS,
    ),
    Patch(
        "compiles_with_include_first",
        "the cross compiler finds torch's x86 SLEEF header before the target's (no cross build)",
        checks.compile_commands_run_by_lacks,
        CROSS,
    ),
    Patch(
        "wrapper_chosen",
        "each compile gets the C++ wrapper inductor picked first in the process, not its own",
        checks.wrapper_choice_lacks,
    ),
    Patch(
        "inductor_cache_at",
        "inductor compiles in its own cache folder, so the package's bytes depend on that path",
        checks.inductor_cache_at_lacks,
    ),
    Patch(
        "torch_at",
        "the compile commands name torch where this venv has it, so the package's bytes depend on that path",
        checks.torch_at_lacks,
    ),
    Patch(
        "compile_commands_run_by",
        "inductor's compiles do not go through ccache",
        checks.compile_commands_run_by_lacks,
    ),
    Patch(
        "byte_loads_direct",
        "AVX2 kernels load 8-bit vectors through a stack buffer (slower pixel policies)",
        checks.byte_loads_direct_lacks,
        isas=("avx2",),
    ),
    Patch(
        "short_loops_scalar",
        "AVX2 kernels vectorize loops shorter than half a vector as a masked tail (slower)",
        checks.short_loops_scalar_lacks,
        isas=("avx2",),
    ),
    Patch(
        "channels_interleaved",
        "x86 kernels turn 2-4 channel rows into channels-last pixels by a generic transposition (slower)",
        checks.channels_interleaved_lacks,
        NATIVE,
        isas=("avx2", "avx512"),
    ),
    Patch(
        "tanh_within_3_5_ulp",
        "AVX2 kernels compute a float tanh with at::vec's 1-ulp function (slower)",
        checks.tanh_within_3_5_ulp_lacks,
        isas=("avx2",),
        numerics="tanh_within_3_5_ulp",
        mark="Sleef_tanhf8_u35",
    ),
    Patch(
        "gemm_choices_filtered",
        "the latency models' GEMM kernels are chosen by timing them on the build machine",
        checks.gemm_choices_filtered_lacks,
        LATENCY,
    ),
    Patch(
        "float_gemm_register_block",
        "the latency models' fp32 GEMMs keep inductor's register blocks (slower)",
        checks.micro_gemm_configs_lacks,
        LATENCY,
    ),
    Patch(
        "one_row_gemm_blocks",
        "the latency models' one-row fp32 GEMMs run a taller block's tail (slower)",
        checks.micro_gemm_configs_lacks,
        LATENCY,
    ),
    Patch(
        "float_micro_kernels_in_registers",
        "the latency models' fp32 micro-kernels keep inductor's lambdas (slower)",
        checks.micro_kernel_text_lacks,
        LATENCY,
    ),
    Patch(
        "gemm_accumulator_on_stack",
        "the bound run's GEMMs allocate their accumulator on the heap on every call",
        checks.gemm_accumulator_on_stack_lacks,
        BOUND,
    ),
    Patch(
        "output_clones_kept",
        "a bound model whose outputs are views of one intermediate may not compile for the bound run",
        checks.output_clones_kept_lacks,
        BOUND,
    ),
)

# Every change to results the build makes beyond torch's own, by the name the manifest lists.
NUMERICS: dict[str, str] = {
    "tanh_within_3_5_ulp": "AVX2 kernels compute a float tanh within 3.5 ulp (SLEEF's u35), not 1 ulp",
    "divisions_as_multiplications": "a division by a constant number is a multiplication by its "
    "reciprocal (within an ulp of the quotient)",
    "narrow_products_padded": "a linear layer of 5-15 out-features is computed 16 wide (MKL sums "
    "its products in another order: other roundings)",
    "wide_products_onednn": "a linear layer of 2 MiB of weights or more is oneDNN's matmul, not "
    "MKL's sgemm (another summation order: other roundings)",
    "many_rows_products_onednn": "in a dynamic model serving more than 128 rows, a linear layer of 96 "
    "in-features or more is oneDNN's matmul, not MKL's sgemm (another summation order: other roundings)",
    "convolutions_onednn": "a 2-D convolution calls oneDNN's convolution op, with the activation after it "
    "(ReLU, tanh, sigmoid, SiLU, GELU, leaky ReLU, hardtanh) fused into it as oneDNN computes it",
}

# tdaot's modules whose source decides what a model compiles to, beside the patches: hashed into
# every model's cache key (code_digest). A package (rewrites) counts with every module in it.
CODE_MODULES = (
    "tdaot._torch_compat",
    "tdaot._torch_compat_channels",
    "tdaot._torch_compat_checks",
    "tdaot._torch_compat_cross",
    "tdaot._torch_compat_gemm",
    "tdaot._torch_compat_isa",
    "tdaot._torch_compat_onednn",
    "tdaot._torch_compat_paths",
    "tdaot.builder.compile",
    "tdaot.builder.cross",
    "tdaot.builder.export",
    "tdaot.builder.gemm_choice",
    "tdaot.builder.inductor_dir",
    "tdaot.builder.patches",
    "tdaot.builder.rewrites",
    "tdaot.builder.targets",
    "tdaot.builder.tuning",
    "tdaot.builder.weights_format",
)


def patch(name: str) -> Patch:
    """The patch named ``name``."""
    return next(p for p in PATCHES if p.name == name)


def concerned(plan, manifest) -> tuple[str, ...]:
    """The patches that concern the model ``plan`` (a tuning.ModelPlan) of a package carrying
    ``manifest``, whether or not this torch takes them, in table order (a CUDA model, whose
    manifest names no vector ISA, gets those of every model); none that changes results when it
    is built with ``exact_math``."""
    cross = CPU_TARGETS[manifest.cpu_target].cross
    wanted = {EVERY, CROSS if cross else NATIVE}
    wanted |= ({LATENCY} if plan.tuning == "latency" else set()) | ({BOUND} if plan.bound else set())
    return tuple(
        p.name
        for p in PATCHES
        if p.where in wanted and _for_isa(p, manifest.cpu_isa) and not (p.numerics and plan.exact_math)
    )


def _for_isa(p: Patch, cpu_isa: str | None) -> bool:
    """Whether ``p`` concerns kernels of ``cpu_isa``: any, where it names none; else the ISA or
    its family, its first word ("avx512" for "avx512 avx512_vnni")."""
    return not p.isas or cpu_isa in p.isas or (cpu_isa or "").split()[:1] in [[isa] for isa in p.isas]


def lacking(names: Iterable[str]) -> dict[str, str]:
    """Of the patches ``names``, those this torch does not take, with what differs."""
    found = {name: patch(name).lacks() for name in names}
    return {name: problem for name, problem in found.items() if problem is not None}


def in_force(plan, manifest) -> tuple[str, ...]:
    """The patches applied while the model ``plan`` compiles: those that concern it and that this
    torch takes."""
    names = concerned(plan, manifest)
    skipped = lacking(names)
    return tuple(name for name in names if name not in skipped)


def in_force_for(plans: Iterable, manifest) -> tuple[str, ...]:
    """The patches in force for any of the models ``plans`` of a package carrying ``manifest``, in
    table order (the manifest's ``patches``)."""
    applied = {name for plan in plans for name in in_force(plan, manifest)}
    return tuple(p.name for p in PATCHES if p.name in applied)


def warn_lacking(names: Iterable[str], stacklevel: int = 2) -> dict[str, str]:
    """A CompatWarning for each of the patches ``names`` this torch does not take (once each);
    returns them with what differs."""
    skipped = lacking(dict.fromkeys(names))
    for name, problem in skipped.items():
        warnings.warn(
            f"tdaot's patch {name!r} does not fit torch {torch.__version__} ({problem}): the package "
            f"is built without it, so {patch(name).without}",
            CompatWarning,
            stacklevel=stacklevel + 1,
        )
    return skipped


def numerics(patch_names: Iterable[str], rewrites: Iterable[str]) -> tuple[str, ...]:
    """The changes to results (``NUMERICS`` names, in its order) of the patches ``patch_names``
    in force and the program rewrites ``rewrites`` made."""
    made = {patch(name).numerics for name in patch_names} | set(rewrites)
    return tuple(name for name in NUMERICS if name in made)


def numerics_in_code(names: Iterable[str], records: Mapping[str, bytes]) -> tuple[str, ...]:
    """Of the changes to results ``names`` a package's models were built to take, those its
    compiled code holds: a patch's change only where its mark is in one of the C++ sources among
    ``records`` (a model without a float tanh has no 3.5-ulp one)."""
    marks = {p.numerics: p.mark.encode() for p in PATCHES if p.numerics and p.mark}
    sources = [data for name, data in records.items() if name.endswith(".cpp")]
    return tuple(n for n in names if n not in marks or any(marks[n] in source for source in sources))


@functools.cache
def code_digest() -> str:
    """sha256 of the source of every module of ``CODE_MODULES``, by module name: the same on every
    machine for the same tdaot source."""
    digest = hashlib.sha256()
    for name in CODE_MODULES:
        for label, source in _module_sources(name):
            digest.update(f"{label}:{len(source)}:".encode())
            digest.update(source)
    return digest.hexdigest()


def _module_sources(name: str) -> list[tuple[str, bytes]]:
    """(a name for each file, its bytes) of the module or package ``name``."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ImportError(f"no source for {name}")
    origin = Path(spec.origin)
    if spec.submodule_search_locations is None:
        return [(name, origin.read_bytes())]
    files = sorted(origin.parent.rglob("*.py"))
    return [(f"{name}/{path.relative_to(origin.parent).as_posix()}", path.read_bytes()) for path in files]
