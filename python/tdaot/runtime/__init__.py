"""The run side of tdaot: load a package into the native runner and run it.

Imports nothing from the build side (tdaot.builder): a service that only runs packages never
loads torch.export or inductor through tdaot.
"""

import warnings

from tdaot import _libtorch
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


_libtorch.symbols_global()  # before torch's own loaders (load_package) see a bound model

__all__ = ["Binding", "BoundTensors", "Policy", "Session", "load", "verify_package", "verify_weights"]
