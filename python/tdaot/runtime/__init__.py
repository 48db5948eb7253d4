"""The run side of tdaot: load a package into the native runner and run it.

Imports nothing from the build side (tdaot.builder): a service that only runs packages never
loads torch.export or inductor through tdaot.
"""

import ctypes
import os
import warnings

import torch

from tdaot.runtime.binding import Binding, BoundTensors
from tdaot.runtime.policy import Policy, load, verify_package, verify_weights
from tdaot.runtime.session import Session

# Names of the last release, kept one more release: each access warns (DeprecationWarning).
DEPRECATED = {
    "NativePolicy": ("Policy", Policy),
    "NativeBinding": ("Binding", Binding),
    "NativeSession": ("Session", Session),
    "verify": ("verify_package", verify_package),
}


def deprecated(module: str, name: str):
    """The value of a deprecated name of ``module``, with a DeprecationWarning naming its successor;
    None when ``name`` is not one."""
    if name not in DEPRECATED:
        return None
    successor, value = DEPRECATED[name]
    warnings.warn(
        f"{module}.{name} is deprecated and will be removed in the next release: use {module}.{successor}",
        DeprecationWarning,
        stacklevel=3,
    )
    return value


def __getattr__(name: str):
    value = deprecated("tdaot.runtime", name)
    if value is None:
        raise AttributeError(f"module 'tdaot.runtime' has no attribute {name!r}")
    return value


def _libtorch_symbols_global() -> None:
    """Make libtorch_cpu's symbols visible to libraries loaded later.

    A bound model is compiled without linking libtorch (``aot_inductor.link_libtorch =
    False``, tdaot.builder.tuning): torch's C shim functions it calls must already be global
    in the process when the runner dlopens it, and Python's ``import torch`` maps
    libtorch_cpu with RTLD_LOCAL. tdaot._C promotes it itself before its own dlopen; this is for
    torch's own loaders in a process that imported tdaot (``load_package``, the container runner
    ``tdaot.export_weights`` reads constants with), which do not.
    """
    library = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    if os.path.exists(library):
        ctypes.CDLL(library, mode=os.RTLD_GLOBAL | os.RTLD_NOLOAD)


_libtorch_symbols_global()

__all__ = ["Binding", "BoundTensors", "Policy", "Session", "load", "verify_package", "verify_weights"]
