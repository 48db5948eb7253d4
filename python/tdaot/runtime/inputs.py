"""Between TensorDicts (or mappings, or keyword tensors) and the runner's tensors keyed by
manifest key."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Union

import torch
from tensordict import TensorDict, TensorDictBase

from tdaot import keys as keyutil
from tdaot.errors import MissingKeyError

Inputs = Union[TensorDictBase, Mapping]


def td_keys(manifest_keys: Sequence[str]) -> list[tuple[str, object]]:
    """(manifest key, TensorDict key) pairs."""
    return [(key, keyutil.td_key(keyutil.from_manifest(key))) for key in manifest_keys]


def keyed_inputs(
    in_keys: list[tuple[str, object]], inputs: Inputs | None, tensors: dict
) -> dict[str, torch.Tensor]:
    """Inputs keyed by manifest key. From a TensorDict only the entries of ``in_keys`` are
    taken; a mapping or keyword tensors are passed whole, so the C++ side reports extras."""
    if isinstance(inputs, TensorDictBase):
        if tensors:
            raise TypeError("pass either a TensorDict or keyword tensors, not both")
        found = {}
        for name, key in in_keys:
            value = inputs.get(key, None)
            if value is not None:  # a missing key is reported by the C++ validation
                found[name] = value
        return found
    merged = dict(inputs or {})
    merged.update(tensors)
    return {keyutil.SEPARATOR.join(keyutil.as_tuple(key)): value for key, value in merged.items()}


def as_tensordict(out_keys: list[tuple[str, object]], outputs: Mapping[str, torch.Tensor]) -> TensorDict:
    values = [outputs[name] for name, _ in out_keys]
    return TensorDict(
        {key: value for (_, key), value in zip(out_keys, values)}, batch_size=values[0].shape[:1]
    )


def closest_key(wanted: str, given: Sequence[str]) -> str | None:
    """The key of ``given`` that ``wanted`` is most likely misspelt as (cpp/src/core/key_hints.cpp's
    closest_key: within a third of the length, at least 2 edits, or one a prefix or suffix of the
    other)."""
    best, best_distance = None, 0
    for key in given:
        allowed = max(2, max(len(key), len(wanted)) // 3)
        distance = _edit_distance(wanted, key)
        close = distance <= allowed or (
            key
            and wanted
            and (
                key.startswith(wanted)
                or wanted.startswith(key)
                or key.endswith(wanted)
                or wanted.endswith(key)
            )
        )
        if close and (best is None or distance < best_distance):
            best, best_distance = key, distance
    return best


def _edit_distance(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        diagonal, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            above = row[j]
            row[j] = min(row[j] + 1, row[j - 1] + 1, diagonal + (ca != cb))
            diagonal = above
    return row[-1]


def missing_keys_message(missing: Sequence[str], given: Sequence[str]) -> str:
    """``missing input key(s) 'a' (given: 'x'; did you mean 'a' for 'x'?)``, as the C++ validation
    words it."""
    text = "missing input key(s) " + ", ".join(f"'{k}'" for k in missing)
    if not given:
        return text
    hints = [f"'{k}' for '{near}'" for k in missing if (near := closest_key(k, given)) is not None]
    text += " (given: " + ", ".join(f"'{k}'" for k in given)
    if hints:
        text += "; did you mean " + ", ".join(hints) + "?"
    return text + ")"


@contextmanager
def naming_given_keys(in_keys: list[tuple[str, object]], inputs: Inputs | None) -> Iterator[None]:
    """A MissingKeyError for a TensorDict names its keys: only the manifest's entries are
    passed to the C++ validation, which therefore never sees what the TensorDict held instead
    (``obs`` for ``observation``)."""
    try:
        yield
    except MissingKeyError as error:
        if not isinstance(inputs, TensorDictBase):
            raise
        head, sep, tail = str(error).partition("; expected keys: ")
        wanted = {name for name, _ in in_keys}
        missing = [name for name, key in in_keys if f"'{name}'" in head and inputs.get(key, None) is None]
        given = [
            keyutil.SEPARATOR.join(keyutil.as_tuple(key))
            for key in inputs.keys(include_nested=True, leaves_only=True)
            if keyutil.SEPARATOR.join(keyutil.as_tuple(key)) not in wanted
        ]
        if not missing:
            raise
        raise MissingKeyError(missing_keys_message(missing, given) + sep + tail, error.key) from None
