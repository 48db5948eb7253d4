"""tdaot: tensordict policies to native AOTInductor packages, run from C++ or Python.

art = tdaot.build(policy, example_td, "policy.pt2")
native = tdaot.load("policy.pt2")  # a tdaot.Policy: a tensordict module
out = native(example_td)  # writes the out keys into example_td and returns it
tdaot.testing.assert_parity(policy, "policy.pt2", example_td)

``import tdaot`` loads the runtime side only; the build side (torch.export, inductor) is
imported the first time a build name (``build``, ``Artifact``, ``BuildOptions``) or
``tdaot.testing`` is used, the signing side (``cryptography``) with ``tdaot.sign``, and the
trained-run readers with ``tdaot.from_rsl_rl``.
"""

import importlib

# _native first: it refuses a tdaot._C built for another torch by name, before anything imports it.
from tdaot import _native, errors
from tdaot._version import __version__
from tdaot.contract import Contract, Signal, Term
from tdaot.errors import *  # noqa: F403 - the error classes are top-level API
from tdaot.manifest import (
    BatchRange,
    LiteSupport,
    Manifest,
    ModelSpec,
    Recurrent,
    Source,
    StatePair,
    TensorSpec,
    read_manifest,
)
from tdaot.runtime import (
    Binding,
    BoundTensors,
    Policy,
    Session,
    load,
    verify_package,
    verify_weights,
)
from tdaot.runtime import deprecated as _deprecated

# Names imported on first use: (module, attribute), attribute None for the module itself.
_LAZY = {
    "Artifact": ("tdaot.builder", "Artifact"),
    "BuildOptions": ("tdaot.builder", "BuildOptions"),
    "build": ("tdaot.builder", "build"),
    "export_weights": ("tdaot.builder.weights", "export_weights"),
    "from_rsl_rl": ("tdaot.trained.rsl_rl", "from_rsl_rl"),
    "sign": ("tdaot.signing", "sign"),
    "testing": ("tdaot.testing", None),
}


def __getattr__(name: str):
    if name == "cmake_prefix_path":
        # The C++ package's prefix, as torch.utils.cmake_prefix_path (tdaot._native).
        return _native.cmake_prefix()
    old = _deprecated("tdaot", name)  # NativePolicy, NativeBinding, NativeSession, verify: warn
    if old is not None:
        return old
    if name not in _LAZY:
        raise AttributeError(f"module 'tdaot' has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, "cmake_prefix_path"})


__all__ = [
    *errors.__all__,
    "Artifact",  # noqa: F405 - imported on first use (__getattr__)
    "BatchRange",
    "Binding",
    "BoundTensors",
    "BuildOptions",  # noqa: F405 - imported on first use (__getattr__)
    "Contract",
    "LiteSupport",
    "Manifest",
    "ModelSpec",
    "Policy",
    "Recurrent",
    "Session",
    "Signal",
    "Source",
    "StatePair",
    "TensorSpec",
    "Term",
    "__version__",
    "build",  # noqa: F405 - imported on first use (__getattr__)
    "cmake_prefix_path",  # noqa: F405 - computed on use (__getattr__)
    "export_weights",  # noqa: F405 - imported on first use (__getattr__)
    "from_rsl_rl",  # noqa: F405 - imported on first use (__getattr__)
    "load",
    "read_manifest",
    "sign",  # noqa: F405 - imported on first use (__getattr__)
    "testing",  # noqa: F405 - imported on first use (__getattr__)
    "verify_package",
    "verify_weights",
]
