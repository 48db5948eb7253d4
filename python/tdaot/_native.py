"""tdaot's compiled parts in an install: which torch ``tdaot._C`` was built for, and the C++ prefix.

``tdaot._C`` links libtorch, whose C++ ABI changes with every release: a module built for one
torch and imported beside another fails with an undefined symbol, or worse loads and crashes.
The build writes the torch it compiled against beside the module (``_C_build.json``, see
CMakeLists.txt); :func:`check_torch` reads it before anything imports ``_C`` and refuses a
mismatch by name. ``tdaot/__init__.py`` calls :func:`check_installed_torch` the first time
anything imports ``tdaot._C``, not at ``import tdaot``: the torch-free parts (``tdaot-lite``,
``tdaot --cmake-prefix``, the build memo's replay) never check torch. Neither imports ``_C``.

The wheel also installs the C++ package (headers, ``libtdaot_lite.so``, the static runtime
libraries, the tools, ``lib/cmake/tdaot``) under ``tdaot/_cpp``: :func:`cmake_prefix` is the
folder to hand CMake (``-DCMAKE_PREFIX_PATH=$(python -m tdaot --cmake-prefix)``).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os

from tdaot.errors import TorchMismatchError
from tdaot.versions import same_torch_release, torch_release

BUILD_INFO = "_C_build.json"
CPP_PREFIX = "_cpp"


def module_dir() -> str | None:
    """The folder that holds ``tdaot._C`` (site-packages/tdaot, also in an editable install,
    whose Python sources live elsewhere), found without importing it; None when it is absent."""
    spec = importlib.util.find_spec("tdaot._C")
    return os.path.dirname(spec.origin) if spec is not None and spec.origin else None


def built_for(directory: str) -> str | None:
    """The torch version the ``tdaot._C`` in ``directory`` was built against, or None when the
    build wrote none there (a module built before tdaot recorded it)."""
    path = os.path.join(directory, BUILD_INFO)
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)["torch"]


def check_torch(installed: str, directory: str | None) -> None:
    """Raises TorchMismatchError when the ``tdaot._C`` in ``directory`` was built against
    another torch release than ``installed`` (local tags such as ``+cu132`` do not count: see
    tdaot.versions); says how to rebuild."""
    built = built_for(directory) if directory else None
    if built is None or same_torch_release(built, installed):
        return
    module = os.path.join(directory, "_C")
    raise TorchMismatchError(
        f"tdaot's compiled module ({module}*.so) was built against torch {built}, but torch {installed} "
        "is installed: a C++ extension only loads with the torch it was compiled against. Rebuild "
        "tdaot against the installed torch: `pip install --no-build-isolation --no-deps --force-reinstall "
        "<tdaot source or sdist>` (in a source checkout: `make setup`, or `pip install "
        "--no-build-isolation --no-deps -e .`), or install the torch it was built for "
        f"(pip install torch=={torch_release(built)})"
    )


def cmake_prefix() -> str:
    """The C++ package's prefix inside the installed tdaot (``tdaot/_cpp``); FileNotFoundError
    when this install has none."""
    directory = module_dir()
    prefix = os.path.join(directory, CPP_PREFIX) if directory else None
    config = os.path.join(prefix, "lib", "cmake", "tdaot", "tdaotConfig.cmake") if prefix else ""
    if not os.path.isfile(config):
        raise FileNotFoundError(
            f"this tdaot install has no C++ package ({prefix or 'no tdaot._C found'}): it is installed by "
            "`pip install` of tdaot (scikit-build-core), or from a source checkout with "
            "`make install PREFIX=DIR`"
        )
    return prefix


def installed_torch() -> str:
    """The installed torch's version, read from its metadata: importing torch costs seconds, and
    `import tdaot` imports it only when a name needs it."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:  # a torch without metadata (a source tree)
        import torch

        return torch.__version__


def check_installed_torch() -> None:
    """:func:`check_torch` for this install: the installed torch against the module's build."""
    check_torch(installed_torch(), module_dir())
