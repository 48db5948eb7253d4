"""The inductor options of one model's build: what the compile passes to AOTInductor and what
the build cache's key hashes (tdaot.builder.compile and tdaot.builder.cache both read them here)."""

from __future__ import annotations

from tdaot.builder.options import BuildOptions
from tdaot.builder.targets import CPU_TARGETS, inductor_options
from tdaot.builder.tuning import ModelPlan, model_options
from tdaot.manifest import Manifest


def compile_options(kernel_threads: int) -> dict:
    """Inductor options for the OpenMP threads of the generated kernels.

    Left alone, inductor hard-codes `#pragma omp parallel num_threads(N)` with N = the
    build machine's thread count (a 64-core CI runner would bake 64 threads into a
    robot's policy). 1 (tdaot's default, what control loops run) emits serial kernels:
    no OpenMP region at all, ~20 % faster at batch 1 than a 1-thread parallel region.
    N > 1 hard-codes N; 0 leaves the count to the runtime's intra_op_threads.
    """
    if kernel_threads == 0:
        return {"cpp.dynamic_threads": True}
    return {"cpp.dynamic_threads": False, "cpp.threads": kernel_threads}


def inductor_configs(manifest: Manifest, options: BuildOptions, plan: ModelPlan) -> dict:
    """Every inductor option of one model's build but the manifest: threads, the model's
    tuning and the CPU target."""
    return {
        **compile_options(options.kernel_threads),
        **model_options(plan),
        **inductor_options(CPU_TARGETS[manifest.cpu_target]),
        # Every weight stays a constant of the model, never a literal in its code (inductor
        # inlines small ones, biases included), so that a weight swap reaches all of them.
        "always_keep_tensor_constants": True,
    }
