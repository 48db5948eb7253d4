"""What the skrl, rl_games and Stable-Baselines3 readers share: reading a checkpoint as tensors
only, naming keys in refusals, and taking an MLP's Linear layers out of a state dict.

Each library's own layout lives in its reader (:mod:`tdaot.trained.skrl`,
:mod:`tdaot.trained.rl_games`, :mod:`tdaot.trained.sb3`); this module knows none of them.
Every refusal is an InvalidArgumentError whose message names the key, path or value at fault.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import torch

from tdaot.errors import InvalidArgumentError
from tdaot.trained.isaac_yaml import load_isaac_yaml
from tdaot.trained.safe_pickle import NUMPY_DATA

# What torch.load's weights-only unpickler may build beside tensors: numpy arrays, dtypes and
# scalars (rl_games saves its ``last_mean_rewards`` as a numpy scalar); data only, no code.
_NUMPY_DATA = [*dict.fromkeys(NUMPY_DATA.values()), *(type(np.dtype(c)) for c in "?bhilqBHILQefdg")]


def refuse(message: str) -> NoReturn:
    raise InvalidArgumentError(message)


def key_names(keys: Iterable[Any]) -> str:
    """Keys as a refusal names them: sorted, quoted, at most 12 and a count of the rest."""
    names = sorted(str(k) for k in keys)
    shown = ", ".join(repr(k) for k in names[:12])
    if not names:
        return "none"
    return shown + (f" (and {len(names) - 12} more)" if len(names) > 12 else "")


def load_tensors(path: Path, library: str) -> Any:
    """``torch.load`` of a checkpoint with ``weights_only=True`` (no code in the file runs),
    numpy's data types allowed beside tensors."""
    try:
        with torch.serialization.safe_globals(_NUMPY_DATA):
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - every unreadable file is reported the same way
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        refuse(
            f"cannot read {library} checkpoint '{path}' as tensors only (torch.load weights_only=True): "
            f"{type(err).__name__}: {first}"
        )


def load_yaml_mapping(path: Path, what: str) -> Mapping[str, Any]:
    """An Isaac Lab style YAML dump (``params/agent.yaml``) read as data; refused unless a mapping."""
    data = load_isaac_yaml(path)
    if not isinstance(data, Mapping):
        refuse(f"'{path}' holds a {type(data).__name__}, not the {what} mapping")
    return data


def state_dict(value: Any, where: str) -> dict[str, torch.Tensor]:
    """``value`` as a state dict (names to tensors), refused by ``where`` otherwise."""
    if not isinstance(value, Mapping) or not all(isinstance(v, torch.Tensor) for v in value.values()):
        refuse(f"{where} is not a state dict (names to tensors)")
    return dict(value)


def entry_state_dict(checkpoint: Any, entry: str, what: str, others: str) -> dict[str, torch.Tensor]:
    """The state dict a checkpoint (the loaded object) holds under its top-level ``entry``; refused
    naming the keys found when it is not ``what`` (a mapping with that entry, and ``others``)."""
    if not isinstance(checkpoint, Mapping) or entry not in checkpoint:
        found = key_names(checkpoint) if isinstance(checkpoint, Mapping) else type(checkpoint).__name__
        refuse(f"not {what}: top-level keys {found}; expected {entry!r} (and {others})")
    return state_dict(checkpoint[entry], f"the checkpoint's {entry!r}")


def take(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The entries under ``prefix``, removed from ``state``, by their names after it."""
    taken = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
    for name in taken:
        del state[prefix + name]
    return taken


def linear_chain(params: Mapping[str, torch.Tensor], prefix: str, where: str, *, stride: int = 2):
    """The Linear layers of an ``nn.Sequential`` whose Linear modules sit at indices 0, stride,
    2*stride, ... (an activation between each two), as (weight, bias) pairs in order; each one's
    input must be the previous one's output."""
    indices: dict[int, dict[str, torch.Tensor]] = {}
    for name, tensor in params.items():
        match = re.fullmatch(r"(\d+)\.(weight|bias)", name)
        if match is None:
            refuse(
                f"{where}: unexpected key {prefix + name!r}; expected only {prefix}N.weight and "
                f"{prefix}N.bias (N the index of each Linear layer)"
            )
        indices.setdefault(int(match.group(1)), {})[match.group(2)] = tensor
    if not indices:
        refuse(f"{where}: no {prefix}N.weight keys (the actor's MLP)")
    order = sorted(indices)
    layers: list[tuple[torch.Tensor, torch.Tensor]] = []
    for position, index in enumerate(order):
        key = f"{prefix}{index}"
        weight, bias = indices[index].get("weight"), indices[index].get("bias")
        if weight is None or bias is None:
            refuse(f"{where}: {key}.weight and {key}.bias must both be present")
        if weight.dim() != 2 or bias.shape != (weight.shape[0],):
            refuse(
                f"{where}: {key} is not a Linear layer: weight {list(weight.shape)}, bias {list(bias.shape)}"
            )
        if index != position * stride:
            refuse(
                f"{where}: a Linear layer at {key}; expected them at {prefix}0, {prefix}{stride}, "
                f"{prefix}{2 * stride}, ... (one activation between two)"
            )
        if layers and layers[-1][0].shape[0] != weight.shape[1]:
            refuse(
                f"{where}: {key}.weight takes {weight.shape[1]} features but the layer before gives "
                f"{layers[-1][0].shape[0]}"
            )
        layers.append((weight, bias))
    return layers


def linear_pair(params: Mapping[str, torch.Tensor], prefix: str, where: str):
    """One Linear layer's (weight, bias) under ``prefix`` (``prefix`` + weight / bias)."""
    weight, bias = params.get(prefix + "weight"), params.get(prefix + "bias")
    if weight is None or bias is None:
        refuse(f"{where}: {prefix}weight and {prefix}bias must both be present")
    if weight.dim() != 2 or bias.shape != (weight.shape[0],):
        refuse(
            f"{where}: {prefix[:-1]} is not a Linear layer: weight {list(weight.shape)}, bias "
            f"{list(bias.shape)}"
        )
    return weight, bias


def vector(value: torch.Tensor, size: int, where: str) -> torch.Tensor:
    """A normalizer statistic as a 1-D tensor of ``size`` entries (the observation's)."""
    if value.shape != (size,):
        refuse(f"{where} is {list(value.shape)}, expected [{size}] (one entry per observation)")
    return value


def check_unknown(state: Mapping[str, Any], where: str, expected: str) -> None:
    """Refuse the keys left in ``state`` once every known one was taken."""
    if state:
        refuse(f"{where}: keys tdaot does not know: {key_names(state)}; expected {expected}")


def number(value: Any, where: str) -> float:
    """A config value that must be a plain number (an int or float, not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        refuse(f"{where} is {value!r}, expected a number")
    return float(value)


def rnn_layer(params: Mapping[str, torch.Tensor], prefix: str, where: str) -> torch.nn.LSTM | torch.nn.GRU:
    """A one-directional ``torch.nn.LSTM`` or ``GRU`` without projections from its parameters
    under ``prefix`` (``weight_ih_l0``, ``weight_hh_l0``, ``bias_ih_l0``, ``bias_hh_l0``, ... per
    layer); which one the gates say (4 x hidden rows: LSTM, 3 x: GRU)."""
    layers = 0
    while f"weight_ih_l{layers}" in params:
        layers += 1
    names = ("weight_ih_l", "weight_hh_l", "bias_ih_l", "bias_hh_l")
    expected = {f"{name}{k}" for name in names for k in range(max(layers, 1))}
    if not layers or set(params) != expected:
        refuse(
            f"{where}: recurrent layer keys {key_names(prefix + k for k in params)}; expected "
            f"{key_names(prefix + k for k in expected)} (a one-directional torch LSTM or GRU without "
            "projections)"
        )
    hidden = params["weight_hh_l0"].shape[1]
    inputs = params["weight_ih_l0"].shape[1]
    gates = params["weight_ih_l0"].shape[0] // hidden if hidden else 0
    if gates not in (3, 4) or params["weight_ih_l0"].shape[0] != gates * hidden:
        refuse(
            f"{where}: {prefix}weight_ih_l0 {list(params['weight_ih_l0'].shape)} is neither an LSTM's "
            f"[4 * {hidden}, n] nor a GRU's [3 * {hidden}, n]"
        )
    cls = torch.nn.LSTM if gates == 4 else torch.nn.GRU
    rnn = cls(inputs, hidden, layers, dtype=params["weight_ih_l0"].dtype)
    for name, value in rnn.state_dict().items():
        if tuple(params[name].shape) != tuple(value.shape):
            refuse(
                f"{where}: {prefix}{name} is {list(params[name].shape)}, expected {list(value.shape)} (an "
                f"{cls.__name__} of {inputs} inputs, hidden size {hidden})"
            )
    rnn.load_state_dict(dict(params))
    return rnn
