"""``tdaot inspect PKG --leapp``: a package's contract written as a LEAPP 0.7 YAML, so a runtime
that reads LEAPP's contract reads a tdaot package's.

One node, named by the contract's ``leapp.node`` metadata (a package built from a LEAPP bundle)
or ``policy``: ``models.<node>.inputs`` / ``outputs`` from the manifest's keys, dtypes and shapes
([1, n]: batch first, as LEAPP traces), ``kind`` from the contract's ``leapp.kind.<key>``
metadata, ``element_names`` from each signal's names; a joint target's ``stiffness`` /
``damping`` as the constant outputs ``kp`` / ``kd`` LEAPP gives them (their ``value`` beside);
``parameters`` the package file (``backend: tdaot``, its sha256 and md5); ``pipeline`` the
inputs and outputs, the recurrent state as ``feedback_flow`` and ``configs.frequency`` =
1 / control_dt. ``is_init`` is not an input LEAPP knows: a LEAPP runtime resets feedback itself.
"""

from __future__ import annotations

import hashlib
import os

import yaml

from tdaot import keys
from tdaot.manifest import Manifest
from tdaot.trained.leapp import IS_INIT_KEY, KIND_METADATA

NODE_METADATA = "leapp.node"


def _digest(path: str, algorithm: str) -> str:
    digest = hashlib.new(algorithm)
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class _Flow(list):
    """A list YAML writes on one line, as LEAPP writes shapes and names."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(
    _Flow, lambda dumper, data: dumper.represent_sequence("tag:yaml.org,2002:seq", data, True)
)


def _entry(spec, contract, name: str) -> dict:
    entry = {"name": name, "dtype": spec.dtype, "shape": _Flow([1, *spec.shape]), "type": "tensor"}
    if contract is not None:
        kind = contract.metadata.get(KIND_METADATA + spec.key)
        if kind:
            entry["kind"] = kind
        signal = contract.signal(keys.from_manifest(spec.key))
        if signal is not None and signal.names:
            entry["element_names"] = _Flow([_Flow(signal.names)])
    return entry


def leapp_yaml(package: str | os.PathLike, manifest: Manifest) -> str:
    """The LEAPP YAML of ``package`` (its manifest read already)."""
    contract = manifest.contract
    node = (contract.metadata.get(NODE_METADATA) if contract else None) or "policy"
    state = {pair.output: pair.input for pair in (manifest.recurrent.state if manifest.recurrent else ())}
    inputs = [_entry(s, contract, s.key) for s in manifest.inputs if s.key != IS_INIT_KEY]
    gains = {}
    for spec in manifest.outputs:
        signal = contract.signal(keys.from_manifest(spec.key)) if contract else None
        for field, kind in (("stiffness", "kp"), ("damping", "kd")):
            values = getattr(signal, field, None) if signal is not None else None
            if values is not None and kind not in gains:
                per_joint = list(values) if isinstance(values, tuple) else [values] * len(signal.names)
                names = _Flow([_Flow(signal.names)])
                gains[kind] = {
                    "name": kind, "dtype": "float32", "shape": _Flow([1, len(signal.names)]),
                    "type": "tensor", "kind": kind, "element_names": names, "value": _Flow(per_joint),
                }  # fmt: skip
    outputs = []
    for spec in manifest.outputs:
        entry = _entry(spec, contract, state.get(spec.key, spec.key))
        if entry["name"] in gains:  # the package's own constant kp / kd output (a LEAPP bundle's)
            entry.update({k: v for k, v in gains.pop(entry["name"]).items() if k not in entry})
        outputs.append(entry)
    outputs += gains.values()
    path = os.fspath(package)
    models = {
        node: {
            "inputs": inputs,
            "outputs": outputs,
            "parameters": {
                "model_path": os.path.basename(path),
                "md5sum": _digest(path, "md5"),
                "sha256sum": _digest(path, "sha256"),
                "backend": "tdaot",
                "tdaot_version": manifest.tdaot_version,
                "torch_version": manifest.torch_version,
            },
        }
    }
    pipeline: dict = {}
    if contract is not None:
        pipeline["configs"] = {"frequency": 1.0 / contract.control_dt}
    pipeline["data_flow"] = {}
    pipeline["feedback_flow"] = {f"{node}/{state[o]}": _Flow([f"{node}/{state[o]}"]) for o in state}
    pipeline["inputs"] = {node: _Flow([e["name"] for e in inputs if e["name"] not in state.values()])}
    pipeline["outputs"] = {node: _Flow([e["name"] for e in outputs if e["name"] not in state.values()])}
    text = yaml.dump({"models": models}, Dumper=_Dumper, sort_keys=False)
    return text + "\n" + yaml.dump({"pipeline": pipeline}, Dumper=_Dumper, sort_keys=False)
