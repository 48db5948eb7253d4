"""CPU targets: which instructions the compiled kernels may use.

``native`` compiles for the build host (-march=native, its widest vector ISA). The
x86-64 microarchitecture levels pin both gcc's -march and inductor's vector width, so a
package built on an AVX-512 CI machine for ``x86-64-v3`` holds no AVX-512 instruction
and runs on any AVX2 robot computer.

``aarch64`` is 64-bit ARM with NEON (armv8-a: Jetson Orin, Raspberry Pi 4/5, RK3588, Graviton):
on an x86 host inductor generates NEON kernels and the aarch64 cross compiler builds them
(tdaot.builder.cross); a package for it holds only the static-batch models the lite runtime
runs (tdaot.builder.pipeline). On an aarch64 host it compiles natively through the same code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator
from dataclasses import dataclass

import torch

from tdaot import _torch_compat
from tdaot.builder.cross import host_architecture, toolchain
from tdaot.errors import BuildError


@dataclass(frozen=True)
class CpuTarget:
    name: str
    march: str | None  # gcc -march; None keeps inductor's default (native)
    simdlen: int | None  # inductor vector width in bits; None picks the host's widest; 1 disables
    # Inductor ISA classes allowed; None allows all. Inductor adds each ISA's own flags
    # (-mavx512vnni, -mavx512bf16, AMX) on top of -march, so a level must exclude the
    # ISAs that go beyond it.
    isa_classes: tuple[str, ...] | None = None
    # The architecture the kernels run on; None: the build host's.
    architecture: str | None = None

    @property
    def cross(self) -> bool:
        """Whether inductor generates code for another ISA family than the build host's (its
        ISA set, not probed, and the architecture's compiler: tdaot.builder.cross)."""
        return self.architecture is not None


CPU_TARGETS: dict[str, CpuTarget] = {
    t.name: t
    for t in (
        CpuTarget("native", None, None),
        # v2 has SSE4.2 at most: inductor has no 128-bit x86 ISA, so its kernels stay scalar.
        CpuTarget("x86-64-v2", "x86-64-v2", 1, ()),
        CpuTarget("x86-64-v3", "x86-64-v3", 256, ("VecAVX2",)),
        CpuTarget("x86-64-v4", "x86-64-v4", 512, ("VecAVX512",)),
        # armv8-a: every 64-bit ARM has NEON (inductor's VecNEON, 128 bits); no SVE.
        CpuTarget("aarch64", "armv8-a", 128, ("VecNEON",), architecture="aarch64"),
    )
}


def inductor_options(target: CpuTarget) -> dict:
    """The inductor config entries that compile for ``target``."""
    options = {}
    if target.march is not None:
        if not _torch_compat.inductor_has_option("cpp.march"):
            import torch

            raise BuildError(
                f"cpu_target {target.name!r} needs inductor's option cpp.march, which torch "
                f"{torch.__version__} lacks (its kernels are built for the build host); build with "
                "cpu_target='native' on the target machine, or with a newer torch"
            )
        options["cpp.march"] = target.march
    if target.simdlen is not None:
        options["cpp.simdlen"] = target.simdlen
    if target.cross:
        options["cpp.cxx"] = toolchain(target.architecture).compiler
    return options


def architecture(target: CpuTarget) -> str:
    """The architecture a package built for ``target`` runs on ("x86_64", "aarch64")."""
    return target.architecture or host_architecture()


@contextlib.contextmanager
def compiling_for(target: CpuTarget, patches: Collection[str] = ()) -> Iterator[None]:
    """Inductor configured to generate code for ``target`` only, for the duration, with those of
    tdaot's kernel patches named in ``patches`` (the patches in force, tdaot.builder.patches). A
    cross target's ISA is set, not probed on this host, and takes none of the x86 kernel patches."""
    if target.cross:
        (isa_class,) = target.isa_classes
        with (
            _torch_compat.inductor_config(inductor_options(target)),
            _torch_compat.vector_isa_set_to(isa_class),
        ):
            yield
        return
    applied = {
        "vector_isas_limited_to": lambda: _torch_compat.vector_isas_limited_to(target.isa_classes),
        "byte_loads_direct": _torch_compat.byte_loads_direct,
        "channels_interleaved": _torch_compat.channels_interleaved,
        "short_loops_scalar": _torch_compat.short_loops_scalar,
        "tanh_within_3_5_ulp": _torch_compat.tanh_within_3_5_ulp,
    }
    with contextlib.ExitStack() as stack:
        stack.enter_context(_torch_compat.inductor_config(inductor_options(target)))
        for name, enter in applied.items():
            if name in patches:
                stack.enter_context(enter())
        yield


@contextlib.contextmanager
def compiles_for(target: CpuTarget) -> Iterator[None]:
    """Inductor's compile commands as ``target``'s toolchain needs them (its headers first), for
    the duration; entered inside tdaot.builder.compiler_cache's routing."""
    folder = toolchain(target.architecture).include_first if target.cross else None
    if folder is None:
        yield
        return
    with _torch_compat.compiles_with_include_first(folder):
        yield


def vector_isa(target: CpuTarget, limited: bool = True) -> str:
    """The vector ISA inductor generates kernels for ("" when scalar), as the manifest records it
    (``limited``: inductor's ISAs limited to the target's, the patch vector_isas_limited_to).
    Without the limit, a target that pins ISAs is refused where inductor would pick another."""
    with compiling_for(target, ("vector_isas_limited_to",) if limited else ()):
        picked = _torch_compat.picked_vector_isa_class()
        isa = _torch_compat.picked_vector_isa()
    if not limited and target.isa_classes is not None and picked and picked not in target.isa_classes:
        raise BuildError(
            f"cpu_target {target.name!r} needs tdaot's patch 'vector_isas_limited_to', which does not "
            f"fit torch {torch.__version__}: inductor would build {picked} kernels, which the target "
            "lacks; build with cpu_target='native' on the target machine"
        )
    return isa
