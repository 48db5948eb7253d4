"""tdaot: tensordict policies to native AOTInductor packages, run from C++ or Python.

art = tdaot.build(policy, example_td, "policy.pt2")
native = tdaot.load("policy.pt2")
out = native(example_td)
tdaot.testing.assert_parity(policy, "policy.pt2", example_td)
"""

from tdaot import testing
from tdaot._version import __version__
from tdaot.build import Artifact, build
from tdaot.errors import (
    BatchSizeError,
    BuildError,
    CompileError,
    DeviceError,
    DtypeError,
    ExecutionError,
    ExportError,
    HostMismatchError,
    InputError,
    KeyNameError,
    LayoutError,
    ManifestError,
    MissingKeyError,
    PackageError,
    ShapeError,
    TdaotError,
    UnknownKeyError,
)
from tdaot.export import StaticBatchWarning
from tdaot.manifest import BatchRange, Manifest, Recurrent, Source, StatePair, TensorSpec, read_manifest
from tdaot.runtime import NativePolicy, load

__all__ = [
    "Artifact",
    "BatchRange",
    "BatchSizeError",
    "BuildError",
    "CompileError",
    "DeviceError",
    "DtypeError",
    "ExecutionError",
    "ExportError",
    "HostMismatchError",
    "InputError",
    "KeyNameError",
    "LayoutError",
    "Manifest",
    "ManifestError",
    "MissingKeyError",
    "NativePolicy",
    "PackageError",
    "Recurrent",
    "ShapeError",
    "Source",
    "StatePair",
    "StaticBatchWarning",
    "TdaotError",
    "TensorSpec",
    "UnknownKeyError",
    "__version__",
    "build",
    "load",
    "read_manifest",
    "testing",
]
