"""Between TensorDicts (or mappings, or keyword tensors) and the runner's tensors keyed by
manifest key."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Union

import torch
from tensordict import TensorDict, TensorDictBase

from tdaot import keys as keyutil

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
