"""Policy factories named on the command line or in a config: "FILE.py:FUNCTION" or "MODULE:FUNCTION".

A factory takes no arguments and returns ``(module, example_tensordict)``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys

from tdaot.errors import FactoryError


def load_factory(spec: str):
    """Resolves "path/to/file.py:function" or "package.module:function"."""
    source, sep, name = spec.rpartition(":")
    if not sep or not source or not name.isidentifier():
        raise FactoryError(f"factory {spec!r} must look like FILE.py:FUNCTION or MODULE:FUNCTION")
    if source.endswith(".py") or os.sep in source:
        module = _import_file(source)
    else:
        try:
            module = importlib.import_module(source)
        except Exception as err:  # noqa: BLE001 - user code; reported with its own message
            message = f"cannot import module {source!r}: {type(err).__name__}: {err}"
            if isinstance(err, ModuleNotFoundError) and err.name == source.partition(".")[0]:
                message += _file_hint(source, name)
            raise FactoryError(message) from err
    factory = getattr(module, name, None)
    if not callable(factory):
        raise FactoryError(f"{source!r} has no callable {name!r}")
    return factory


def _file_hint(source: str, name: str) -> str:
    """What to write instead of a MODULE:FUNCTION that is not importable: the file's own form."""
    file = source.replace(".", os.sep) + ".py"
    if os.path.isfile(file):
        return f"; {file!r} is a file here: name it as {file}:{name} (FILE.py:FUNCTION)"
    return f"; for a policy file, name it as path/to/file.py:{name} (FILE.py:FUNCTION)"


def _import_file(source: str):
    if not os.path.isfile(source):
        raise FactoryError(f"factory file {source!r} does not exist")
    path = os.path.abspath(source)
    # One module per file (the hash tells same-named files apart), so two factories of one
    # file share their imports and classes, and messages name the file's classes readably.
    stem = os.path.splitext(os.path.basename(path))[0]
    module_name = f"{stem}_{hashlib.sha256(path.encode()).hexdigest()[:8]}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001
        del sys.modules[module_name]
        raise FactoryError(f"importing {source!r} failed: {type(err).__name__}: {err}") from err
    return module


def call_factory(spec: str):
    """Calls the factory and checks it returned (module, example)."""
    factory = load_factory(spec)
    try:
        result = factory()
    except Exception as err:  # noqa: BLE001
        raise FactoryError(f"factory {spec!r} raised {type(err).__name__}: {err}") from err
    if not (isinstance(result, tuple) and len(result) == 2):
        raise FactoryError(
            f"factory {spec!r} must return (module, example_tensordict), got {type(result).__name__}"
        )
    return result
