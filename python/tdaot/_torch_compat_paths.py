"""torch internals behind where and how inductor compiles: its cache directory and the torch path
its compile commands name (tdaot.builder.inductor_dir builds in a fixed folder through these, so a
package's bytes do not depend on the cache path or the venv), and the function that runs those
commands (tdaot.builder.compiler_cache routes them through ccache). Private torch APIs live in the
_torch_compat modules only."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator


def inductor_cache_dir() -> str:
    """Inductor's own cache directory (TORCHINDUCTOR_CACHE_DIR, else its default)."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return cache_dir()


def inductor_cache_at(folder: str) -> contextlib.AbstractContextManager:
    """Inductor's cache at ``folder`` for the duration."""
    from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir

    return temporary_cache_dir(folder)


@contextlib.contextmanager
def torch_at(path: str) -> Iterator[None]:
    """Inductor's compile commands name torch at ``path`` for the duration."""
    from torch._inductor import cpp_builder
    from torch.utils import cpp_extension

    saved = (cpp_extension._TORCH_PATH, cpp_extension.TORCH_LIB_PATH, cpp_builder._TORCH_PATH)
    saved_script = cpp_builder._LINKER_SCRIPT
    cpp_extension._TORCH_PATH, cpp_extension.TORCH_LIB_PATH = path, os.path.join(path, "lib")
    cpp_builder._TORCH_PATH = path
    cpp_builder._LINKER_SCRIPT = os.path.join(path, "_inductor", "script.ld")
    try:
        yield
    finally:
        cpp_extension._TORCH_PATH, cpp_extension.TORCH_LIB_PATH, cpp_builder._TORCH_PATH = saved
        cpp_builder._LINKER_SCRIPT = saved_script


CompileRunner = Callable[[str, str, Callable[[str, str], None]], None]


@contextlib.contextmanager
def compile_commands_run_by(runner: CompileRunner) -> Iterator[None]:
    """Each C++ command inductor runs (a compile or a link: ``cmd_line`` in ``cwd``) goes to
    ``runner(cmd_line, cwd, plain)`` for the duration, where ``plain`` is inductor's own runner
    (which raises its CppCompileError). The command text inductor hashes into its file names is
    left as it is."""
    from torch._inductor import cpp_builder

    plain = cpp_builder._run_compile_cmd
    cpp_builder._run_compile_cmd = lambda cmd_line, cwd: runner(cmd_line, cwd, plain)
    try:
        yield
    finally:
        cpp_builder._run_compile_cmd = plain
