"""The run side of tdaot: load a package into the native runner and run it.

Imports nothing from the build side (tdaot.builder): a service that only runs packages never
loads torch.export or inductor through tdaot.
"""

from tdaot import _libtorch
from tdaot.runtime.binding import Binding, BoundTensors
from tdaot.runtime.policy import Policy, load, verify_package, verify_weights
from tdaot.runtime.session import Session

_libtorch.symbols_global()  # before torch's own loaders (load_package) see a bound model

__all__ = ["Binding", "BoundTensors", "Policy", "Session", "load", "verify_package", "verify_weights"]
