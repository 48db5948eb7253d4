"""tdaot: tensordict policies to native AOTInductor packages, run from C++ or Python.

art = tdaot.build(policy, example_td, "policy.pt2")
native = tdaot.load("policy.pt2")  # a tdaot.Policy: a tensordict module
out = native(example_td)  # writes the out keys into example_td and returns it
tdaot.testing.assert_parity(policy, "policy.pt2", example_td)

``import tdaot`` loads the runtime side only; the build side (torch.export, inductor) is
imported the first time a build name (``build``, ``Artifact``, ``BuildOptions``) or
``tdaot.testing`` is used, the signing side (``cryptography``) with ``tdaot.sign``, and the
trained-run readers with ``tdaot.from_rsl_rl``, ``from_skrl``, ``from_rl_games``, ``from_sb3``
and ``from_run``.
"""

import importlib
import importlib.util

from tdaot import _native, errors
from tdaot._version import __version__
from tdaot.errors import *  # noqa: F403 - the error classes are top-level API

# Every other name is imported on first use, so `import tdaot` (and the `tdaot` command, whose build
# memo replays a build without torch: tdaot.build_memo) imports neither torch nor tensordict:
# name -> (module, attribute), attribute None for the module itself.
_RUNTIME = ("Binding", "BoundTensors", "Policy", "Session", "load", "verify_package", "verify_weights")
_MANIFEST = (
    "BatchRange",
    "LiteSupport",
    "Manifest",
    "ModelSpec",
    "PackedConvolution",
    "Recurrent",
    "Source",
    "StatePair",
)
_LAZY = {
    **{name: ("tdaot.runtime", name) for name in _RUNTIME},
    **{name: ("tdaot.manifest", name) for name in (*_MANIFEST, "TensorSpec", "read_manifest")},
    **{name: ("tdaot.contract", name) for name in ("Contract", "Signal", "Term")},
    "Supervisor": ("tdaot.contract_supervisor", "Supervisor"),
    "Artifact": ("tdaot.builder", "Artifact"),
    "BuildOptions": ("tdaot.builder", "BuildOptions"),
    "build": ("tdaot.builder", "build"),
    "export_weights": ("tdaot.builder.weights", "export_weights"),
    "from_leapp": ("tdaot.trained.leapp", "from_leapp"),
    "from_rl_games": ("tdaot.trained.rl_games", "from_rl_games"),
    "from_rsl_rl": ("tdaot.trained.rsl_rl", "from_rsl_rl"),
    "from_run": ("tdaot.trained.which_run", "from_run"),
    "from_sb3": ("tdaot.trained.sb3", "from_sb3"),
    "from_skrl": ("tdaot.trained.skrl", "from_skrl"),
    "sign": ("tdaot.signing", "sign"),
    "testing": ("tdaot.testing", None),
}


def __getattr__(name: str):
    if name == "_C":
        # The first import of the compiled module (`from tdaot import _C` asks here): a tdaot._C
        # built for another torch release is refused by name before it is loaded (tdaot._native
        # reads torch's version without importing torch). Torch-free commands never get here.
        _native.check_installed_torch()
        return importlib.import_module("tdaot._C")
    if name == "cmake_prefix_path":
        # The C++ package's prefix, as torch.utils.cmake_prefix_path (tdaot._native).
        return _native.cmake_prefix()
    if name in _LAZY:
        module_name, attribute = _LAZY[name]
        module = importlib.import_module(module_name)
        value = module if attribute is None else getattr(module, attribute)
    elif not name.startswith("__") and importlib.util.find_spec(f"tdaot.{name}") is not None:
        value = importlib.import_module(f"tdaot.{name}")  # tdaot.manifest and the like, as before
    else:
        raise AttributeError(f"module 'tdaot' has no attribute {name!r}")
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, "cmake_prefix_path"})


__all__ = [
    *errors.__all__,
    "Artifact",  # noqa: F405 - imported on first use (__getattr__)
    "BatchRange",  # noqa: F405 - imported on first use (__getattr__)
    "Binding",  # noqa: F405 - imported on first use (__getattr__)
    "BoundTensors",  # noqa: F405 - imported on first use (__getattr__)
    "BuildOptions",  # noqa: F405 - imported on first use (__getattr__)
    "Contract",  # noqa: F405 - imported on first use (__getattr__)
    "LiteSupport",  # noqa: F405 - imported on first use (__getattr__)
    "Manifest",  # noqa: F405 - imported on first use (__getattr__)
    "ModelSpec",  # noqa: F405 - imported on first use (__getattr__)
    "PackedConvolution",  # noqa: F405 - imported on first use (__getattr__)
    "Policy",  # noqa: F405 - imported on first use (__getattr__)
    "Recurrent",  # noqa: F405 - imported on first use (__getattr__)
    "Session",  # noqa: F405 - imported on first use (__getattr__)
    "Signal",  # noqa: F405 - imported on first use (__getattr__)
    "Source",  # noqa: F405 - imported on first use (__getattr__)
    "StatePair",  # noqa: F405 - imported on first use (__getattr__)
    "Supervisor",  # noqa: F405 - imported on first use (__getattr__)
    "TensorSpec",  # noqa: F405 - imported on first use (__getattr__)
    "Term",  # noqa: F405 - imported on first use (__getattr__)
    "__version__",
    "build",  # noqa: F405 - imported on first use (__getattr__)
    "cmake_prefix_path",  # noqa: F405 - computed on use (__getattr__)
    "export_weights",  # noqa: F405 - imported on first use (__getattr__)
    "from_leapp",  # noqa: F405 - imported on first use (__getattr__)
    "from_rl_games",  # noqa: F405 - imported on first use (__getattr__)
    "from_rsl_rl",  # noqa: F405 - imported on first use (__getattr__)
    "from_run",  # noqa: F405 - imported on first use (__getattr__)
    "from_sb3",  # noqa: F405 - imported on first use (__getattr__)
    "from_skrl",  # noqa: F405 - imported on first use (__getattr__)
    "load",  # noqa: F405 - imported on first use (__getattr__)
    "read_manifest",  # noqa: F405 - imported on first use (__getattr__)
    "sign",  # noqa: F405 - imported on first use (__getattr__)
    "testing",  # noqa: F405 - imported on first use (__getattr__)
    "verify_package",  # noqa: F405 - imported on first use (__getattr__)
    "verify_weights",  # noqa: F405 - imported on first use (__getattr__)
]
