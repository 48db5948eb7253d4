"""tdaot: tensordict policies to native AOTInductor packages, run from C++ or Python.

art = tdaot.build(policy, example_td, "policy.pt2")
native = tdaot.load("policy.pt2")
out = native(example_td)
tdaot.testing.assert_parity(policy, "policy.pt2", example_td)
"""

from tdaot import errors, testing
from tdaot._version import __version__
from tdaot.build import Artifact, build
from tdaot.errors import *  # noqa: F403 - the error classes are top-level API
from tdaot.export import StaticBatchWarning
from tdaot.manifest import BatchRange, Manifest, Recurrent, Source, StatePair, TensorSpec, read_manifest
from tdaot.runtime import NativePolicy, NativeSession, load, verify

__all__ = [
    *errors.__all__,
    "Artifact",
    "BatchRange",
    "Manifest",
    "NativePolicy",
    "NativeSession",
    "Recurrent",
    "Source",
    "StatePair",
    "StaticBatchWarning",
    "TensorSpec",
    "__version__",
    "build",
    "load",
    "read_manifest",
    "testing",
    "verify",
]
