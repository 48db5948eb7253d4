"""libtorch_cpu's symbols made global in the process, for the models that do not link it.

A bound (lite-capable) model is compiled without linking libtorch (``aot_inductor.link_libtorch =
False``, tdaot.builder.tuning): torch's C shim functions it calls must already be global in the
process when a loader dlopens it, and Python's ``import torch`` maps libtorch_cpu with RTLD_LOCAL.
tdaot._C promotes it itself before its own dlopen; this is for torch's own loaders, which do not:
``load_package`` (tdaot.runtime, tdaot.testing) and the container runner tdaot.export_weights reads
constants with (tdaot._torch_compat). Both call it on import: `import tdaot` alone imports no torch.
"""

import ctypes
import os

import torch


def symbols_global() -> None:
    library = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    if os.path.exists(library):
        ctypes.CDLL(library, mode=os.RTLD_GLOBAL | os.RTLD_NOLOAD)
