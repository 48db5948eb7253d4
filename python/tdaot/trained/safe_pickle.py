"""A pickle read as data, nothing in it executed: what Stable-Baselines3 leaves as pickles
(VecNormalize's ``vecnormalize.pkl``, the spaces cloudpickled into a model zip's ``data``).

A pickle is a program: unpickling calls whatever callables it names. :func:`load_data` runs
pickle's opcodes with every named global replaced by an inert :class:`PickledObject` class that
records the arguments it is called with and the state it is given, and runs no code of its own.
The one exception is numpy's array and scalar reconstruction (``numpy.ndarray``,
``numpy.dtype``, ``_reconstruct``, ``scalar``), which builds arrays from the bytes in the file
and runs nothing else. The caller then reads the fields it needs out of the recorded objects
and refuses what it does not expect, by name.
"""

from __future__ import annotations

import importlib
import io
import pickle
from typing import Any

import numpy as np

from tdaot.errors import InvalidArgumentError

# numpy's array reconstruction: ``_reconstruct`` + BUILD (protocols < 5), ``_frombuffer``
# (protocol 5), ``scalar``; pickled as numpy.core.* by numpy 1 and numpy._core.* by numpy 2, both
# served by the installed numpy (numpy.core is only imported where numpy._core is absent).
try:
    _CORE = "numpy._core"
    importlib.import_module(_CORE)
except ImportError:  # pragma: no cover - numpy 1.x
    _CORE = "numpy.core"
NUMPY_DATA: dict[tuple[str, str], Any] = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype}
for _part, _name in (("multiarray", "_reconstruct"), ("multiarray", "scalar"), ("numeric", "_frombuffer")):
    _function = getattr(importlib.import_module(f"{_CORE}.{_part}"), _name)
    for _spelling in ("numpy._core", "numpy.core"):
        NUMPY_DATA[(f"{_spelling}.{_part}", _name)] = _function


class PickledObject:
    """A global a pickle named, not imported: ``name`` is its dotted name; an instance records
    the arguments it was made with (``args``) and the state it was given (``state``)."""

    name = ""

    def __new__(cls, *args: Any, **kwargs: Any):
        instance = super().__new__(cls)
        instance.args, instance.state = args, None
        return instance

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __reduce__(self):  # never pickled again
        raise TypeError(f"{self.name} was read as data and is not picklable")

    def __repr__(self) -> str:
        return f"<pickled {self.name}>"


def global_name(value: Any) -> str | None:
    """The dotted name of a global the pickle named (a :class:`PickledObject` class or instance)."""
    if isinstance(value, type) and issubclass(value, PickledObject):
        return value.name
    if isinstance(value, PickledObject):
        return value.name
    return None


class _DataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in NUMPY_DATA:
            return NUMPY_DATA[(module, name)]
        return type(name, (PickledObject,), {"name": f"{module}.{name}"})

    def persistent_load(self, pid):
        raise pickle.UnpicklingError(f"persistent id {pid!r} (not a plain pickle)")


def load_data(data: bytes, where: str) -> Any:
    """The objects of a pickle (``data``), every global read as a :class:`PickledObject`."""
    try:
        return _DataUnpickler(io.BytesIO(data)).load()
    except Exception as err:  # noqa: BLE001 - every unreadable pickle is reported the same way
        raise InvalidArgumentError(
            f"{where} is not a pickle tdaot can read as data (no code in it is run): {type(err).__name__}: "
            f"{err}"
        ) from None


def state_of(value: Any, expected: str, where: str) -> dict[str, Any]:
    """The recorded ``__dict__`` state of an object the pickle made of class ``expected``."""
    if not isinstance(value, PickledObject) or value.name != expected:
        found = global_name(value) or type(value).__name__
        raise InvalidArgumentError(f"{where} is a {found}, expected a {expected}")
    state = value.state
    if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
        state = {**(state[0] or {}), **state[1]}  # (dict state, slot state)
    if not isinstance(state, dict):
        raise InvalidArgumentError(
            f"{where}: a {expected} without its attributes (state {type(state).__name__})"
        )
    return state
