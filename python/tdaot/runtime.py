"""tdaot.load: the native runner (tdaot::Policy through pybind11) with a TensorDict face."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Union

import torch
from tensordict import TensorDict, TensorDictBase

from tdaot import _C
from tdaot import keys as keyutil
from tdaot.manifest import Manifest

Inputs = Union[TensorDictBase, Mapping]


class NativePolicy:
    """A loaded package. Call it with a TensorDict (or keyword tensors) to get a TensorDict.

    Inputs are validated in C++ against the manifest before the compiled model sees
    them; failures raise subclasses of :class:`tdaot.InputError` naming the key.
    Safe to call from several threads; the GIL is released while the model runs.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self._policy = _C.Policy(os.fspath(path))
        self.path = self._policy.path
        self.manifest = Manifest.from_json(self._policy.manifest_json, self.path)
        self._in_keys = [
            (spec.key, keyutil.td_key(keyutil.from_manifest(spec.key))) for spec in self.manifest.inputs
        ]
        self._out_keys = [keyutil.td_key(keyutil.from_manifest(spec.key)) for spec in self.manifest.outputs]

    def __call__(self, inputs: Inputs | None = None, /, **tensors: torch.Tensor) -> TensorDict:
        """Runs the policy. A TensorDict may hold more keys than the manifest's inputs;
        only those are passed. A mapping or keyword tensors must match the inputs exactly
        (manifest keys such as ``"agents.observation"`` or tuples)."""
        outputs = self._policy.run(self._keyed_inputs(inputs, tensors))
        values = [outputs[spec.key] for spec in self.manifest.outputs]
        return TensorDict(dict(zip(self._out_keys, values)), batch_size=values[0].shape[:1])

    def run_positional(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The fast path: tensors in manifest input order, outputs in manifest output order."""
        return tuple(self._policy.run_positional(list(tensors)))

    @property
    def metadata(self) -> dict[str, str]:
        """All AOTInductor metadata of the package, the manifest JSON included."""
        return dict(self._policy.metadata)

    def _keyed_inputs(self, inputs: Inputs | None, tensors: dict) -> dict[str, torch.Tensor]:
        if isinstance(inputs, TensorDictBase):
            if tensors:
                raise TypeError("pass either a TensorDict or keyword tensors, not both")
            found = {}
            for name, key in self._in_keys:
                value = inputs.get(key, None)
                if value is not None:  # a missing key is reported by the C++ validation
                    found[name] = value
            return found
        merged = dict(inputs or {})
        merged.update(tensors)
        return {keyutil.SEPARATOR.join(keyutil.as_tuple(key)): value for key, value in merged.items()}

    def __repr__(self) -> str:
        ins = ", ".join(self.manifest.input_keys)
        outs = ", ".join(self.manifest.output_keys)
        return f"NativePolicy({self.path!r}, inputs=[{ins}], outputs=[{outs}])"


def load(path: str | os.PathLike) -> NativePolicy:
    """Loads a tdaot package into the native runner."""
    return NativePolicy(path)
