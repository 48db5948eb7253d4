"""Deprecated: the lite runtime's subprocess test harness is :mod:`tdaot.testing.lite_runner`.

This module re-exports it for one more release and warns (DeprecationWarning) when imported.
"""

import warnings

from tdaot.testing.lite_runner import *  # noqa: F403
from tdaot.testing.lite_runner import __all__  # noqa: F401

warnings.warn(
    "tdaot.lite is deprecated and will be removed in the next release: it is the lite runtime's "
    "subprocess test harness, now tdaot.testing.lite_runner",
    DeprecationWarning,
    stacklevel=2,
)
