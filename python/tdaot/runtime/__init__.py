"""The run side of tdaot: load a package into the native runner and run it.

Imports nothing from the build side (tdaot.builder): a service that only runs packages never
loads torch.export or inductor through tdaot.
"""

from tdaot.runtime.binding import NativeBinding
from tdaot.runtime.policy import NativePolicy, load, verify, verify_weights
from tdaot.runtime.session import NativeSession

__all__ = ["NativeBinding", "NativePolicy", "NativeSession", "load", "verify", "verify_weights"]
