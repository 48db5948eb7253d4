"""Tensordict keys <-> manifest keys.

A nested tensordict key is a tuple in Python (``("agents", "observation")``) and a
dot-joined string in the manifest and in C++ (``"agents.observation"``).
"""

from __future__ import annotations

from typing import Union

from tdaot.errors import KeyNameError

NestedKey = Union[str, tuple[str, ...]]

SEPARATOR = "."


def as_tuple(key: NestedKey) -> tuple[str, ...]:
    """Normalise a tensordict key to a tuple of strings."""
    if isinstance(key, str):
        return (key,)
    if isinstance(key, tuple) and key and all(isinstance(part, str) for part in key):
        # Tensordict accepts nested tuples like ("a", ("b", "c")); flatten them.
        return key
    if isinstance(key, tuple):
        flat: list[str] = []
        for part in key:
            flat.extend(as_tuple(part))
        if flat:
            return tuple(flat)
    raise KeyNameError(f"{key!r} is not a tensordict key (a string or a tuple of strings)")


def to_manifest(key: NestedKey) -> str:
    """The manifest form of a key; refuses parts that contain the separator."""
    parts = as_tuple(key)
    for part in parts:
        if SEPARATOR in part or not part:
            raise KeyNameError(
                f"key {parts!r}: part {part!r} is empty or contains {SEPARATOR!r}, which the manifest "
                f"uses to join nested keys; rename it (e.g. {part.replace(SEPARATOR, '_')!r})"
            )
    return SEPARATOR.join(parts)


def from_manifest(key: str) -> tuple[str, ...]:
    """The tensordict (tuple) form of a manifest key."""
    return tuple(key.split(SEPARATOR))


def td_key(key: NestedKey) -> NestedKey:
    """The form tensordict prefers: a plain string for a top-level key, else a tuple."""
    parts = as_tuple(key)
    return parts[0] if len(parts) == 1 else parts
