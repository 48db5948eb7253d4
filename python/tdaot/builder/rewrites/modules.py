"""Module rewrites: library modules that run eagerly as they come but that torch.export cannot
trace (a Python branch on a tensor, a reshape that pins the batch, parameters it cannot swap)
are patched on a copy of the policy before it is traced. The user's module is never changed.

Each rewrite applies only to the module types it is written for, found by exact type (or
isinstance on a library base class), and checks the library internals it relies on, naming
the versions it was checked against when they changed. Library classes are looked up only in
libraries the process has already imported: a policy cannot hold a torchrl module unless
torchrl is imported, and tdaot itself never imports torchrl.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from torch import nn

from tdaot.errors import BuildError

# The versions every module rewrite was checked against (the README's table says the same).
CHECKED_AGAINST = "torchrl 0.14.1, tensordict 0.14.3, torch 2.13.0"


@dataclass(frozen=True)
class ModuleRewrite:
    """One named rewrite: which modules it applies to, and how it patches one in place."""

    name: str
    applies_to: str  # the module types, as the README lists them
    changes: str  # what it changes, in one line
    matches: Callable[[nn.Module], bool]
    apply: Callable[[nn.Module], None]  # patches the module (a copy of the user's) in place


def library_class(module_path: str, name: str) -> type | None:
    """``module_path.name`` when the library is already imported, else None (never imports it)."""
    if module_path.split(".", 1)[0] not in sys.modules:
        return None
    return getattr(importlib.import_module(module_path), name, None)


def is_exactly(module: nn.Module, module_path: str, *names: str) -> bool:
    """Whether ``module``'s type is exactly one of the named library classes."""
    return any(type(module) is library_class(module_path, name) for name in names)


def check_signature(rewrite: str, owner: type, name: str, expected: Sequence[str]) -> None:
    """Raises BuildError when ``owner.name``, a library function the rewrite calls or
    replaces, changed its parameters."""
    found = tuple(inspect.signature(getattr(owner, name)).parameters)
    if found != tuple(expected):
        raise internals_changed(
            rewrite, f"{owner.__name__}.{name} takes ({', '.join(found)}), not ({', '.join(expected)})"
        )


def internals_changed(rewrite: str, what: str) -> BuildError:
    """The error for a library whose internals no longer match what a rewrite relies on."""
    return BuildError(
        f"tdaot's export-time rewrite {rewrite!r} relies on library internals checked against "
        f"{CHECKED_AGAINST}, and they changed in the installed version: {what}. Install a "
        "checked version, or report it so the rewrite can follow"
    )


def rewrite_modules(
    policy: nn.Module, rewrites: Sequence[ModuleRewrite]
) -> tuple[nn.Module, tuple[str, ...]]:
    """``policy`` itself when no rewrite applies to any of its modules; otherwise a deep copy
    with every matching module rewritten, and the names of the rewrites applied."""
    found = [(path, rw) for path, module in policy.named_modules() for rw in rewrites if rw.matches(module)]
    if not found:
        return policy, ()
    patched = copy.deepcopy(policy)
    for path, rewrite in found:
        rewrite.apply(patched.get_submodule(path))
    return patched, tuple(dict.fromkeys(rewrite.name for _, rewrite in found))
