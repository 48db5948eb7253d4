"""The parts of an rsl_rl actor's state dict, read as data (tdaot.trained.rsl_rl_layout puts
them together): the MLP's Linear layers, the observation normalizer, the recurrent layer and
its config check. Each refusal is an InvalidArgumentError naming the keys found and expected."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from tdaot.errors import InvalidArgumentError

# EmpiricalNormalization's eps: its constructor default, which no rsl_rl model overrides.
NORMALIZER_EPS = 1e-2
_NORMALIZER_BUFFERS = ("_mean", "_var", "_std", "count")
_RNN_PARAMS = ("weight_ih_l", "weight_hh_l", "bias_ih_l", "bias_hh_l")


@dataclass(frozen=True)
class Normalizer:
    """EmpiricalNormalization at inference: ``(x - mean) / (std + eps)``; mean and std [1, n]."""

    mean: torch.Tensor
    std: torch.Tensor
    eps: float = NORMALIZER_EPS


@dataclass(frozen=True)
class Recurrent:
    """The actor's torch.nn.GRU or LSTM (one step per call), its parameters by torch's names."""

    kind: str  # "gru" or "lstm"
    input_size: int
    hidden_size: int
    num_layers: int
    parameters: dict[str, torch.Tensor]


def refuse_layout(message: str) -> None:
    raise InvalidArgumentError(message)


def key_list(keys) -> str:
    keys = sorted(str(k) for k in keys)
    shown = ", ".join(repr(k) for k in keys[:12])
    return shown + (f" (and {len(keys) - 12} more)" if len(keys) > 12 else "") if keys else "none"


def is_unset(value: Any) -> bool:
    """A config entry that says nothing: absent, null, or ``{}``, which is how Isaac Lab's
    ``dump_yaml`` writes a field left at ``dataclasses.MISSING`` (``class_to_dict`` turns the
    sentinel into an empty dict), e.g. ``obs_groups: {}`` or ``actor_obs_normalization: {}``."""
    return value is None or (isinstance(value, Mapping) and not value)


def config_entry(section: Mapping[str, Any], key: str) -> Any:
    """``section[key]``, None where the entry is unset (:func:`is_unset`)."""
    value = section.get(key)
    return None if is_unset(value) else value


def take_prefixed(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The entries under ``prefix``, removed from ``state``, by their names after it."""
    taken = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
    for name in taken:
        del state[prefix + name]
    return taken


def read_mlp(params: dict[str, torch.Tensor], prefix: str, where: str):
    """The Linear layers of an rsl_rl MLP (nn.Sequential: Linear at 0, 2, 4, ..., an activation
    between each two), in order."""
    indices: dict[int, dict[str, torch.Tensor]] = {}
    for name, tensor in params.items():
        match = re.fullmatch(r"(\d+)\.(weight|bias)", name)
        if match is None:
            refuse_layout(
                f"{where}: unexpected key {prefix + name!r}; an rsl_rl MLP has only {prefix}N.weight and "
                f"{prefix}N.bias (N the index of each Linear)"
            )
        indices.setdefault(int(match.group(1)), {})[match.group(2)] = tensor
    if not indices:
        refuse_layout(f"{where}: no {prefix}N.weight keys (the actor's MLP) in the checkpoint")
    order = sorted(indices)
    layers = []
    for position, index in enumerate(order):
        entry = indices[index]
        key = f"{prefix}{index}"
        weight, bias = entry.get("weight"), entry.get("bias")
        if weight is None or bias is None:
            refuse_layout(f"{where}: {key}.weight and {key}.bias must both be present")
        if weight.dim() != 2 or bias.shape != (weight.shape[0],):
            refuse_layout(
                f"{where}: {key} is not a Linear layer: weight {list(weight.shape)}, bias {list(bias.shape)}"
            )
        if position and index - order[position - 1] != 2:
            refuse_layout(
                f"{where}: Linear layers at {prefix}{order[position - 1]} and {key}: rsl_rl's MLP has one "
                "activation between two Linear layers (indices 0, 2, 4, ...)"
            )
        if layers and layers[-1][0].shape[0] != weight.shape[1]:
            refuse_layout(
                f"{where}: {key}.weight takes {weight.shape[1]} features but the layer before gives "
                f"{layers[-1][0].shape[0]}"
            )
        layers.append((weight, bias))
    if order[0] != 0:
        refuse_layout(f"{where}: the MLP's first Linear layer is {prefix}{order[0]}, expected {prefix}0")
    return tuple(layers)


def read_normalizer(buffers: dict[str, torch.Tensor], prefix: str, where: str) -> Normalizer | None:
    if not buffers:
        return None
    # rsl_rl 2.0.x keeps the sample count as a plain attribute: its state dict has no "count".
    if set(buffers) not in (set(_NORMALIZER_BUFFERS), set(_NORMALIZER_BUFFERS) - {"count"}):
        refuse_layout(
            f"{where}: observation normalizer keys {key_list(prefix + k for k in buffers)}; expected "
            f"{key_list(prefix + k for k in _NORMALIZER_BUFFERS)} (rsl_rl's EmpiricalNormalization)"
        )
    mean, std = buffers["_mean"], buffers["_std"]
    if mean.dim() != 2 or mean.shape[0] != 1 or std.shape != mean.shape:
        refuse_layout(
            f"{where}: {prefix}_mean {list(mean.shape)} and {prefix}_std {list(std.shape)} must both be "
            "[1, n] (EmpiricalNormalization of n observations)"
        )
    return Normalizer(mean=mean, std=std)


def read_recurrent(params: dict[str, torch.Tensor], prefix: str, where: str) -> Recurrent | None:
    if not params:
        return None
    layers = 0
    while f"weight_ih_l{layers}" in params:
        layers += 1
    expected = {f"{name}{k}" for name in _RNN_PARAMS for k in range(layers)}
    if not layers or set(params) != expected:
        refuse_layout(
            f"{where}: recurrent layer keys {key_list(prefix + k for k in params)}; expected "
            f"{key_list(prefix + k for k in expected or {f'{n}0' for n in _RNN_PARAMS})} "
            "(a one-directional torch GRU or LSTM without projections)"
        )
    hidden = params["weight_hh_l0"].shape[1]
    gates = params["weight_ih_l0"].shape[0] // hidden if hidden else 0
    kind = {3: "gru", 4: "lstm"}.get(gates)
    if kind is None or params["weight_ih_l0"].shape[0] != gates * hidden:
        refuse_layout(
            f"{where}: {prefix}weight_ih_l0 {list(params['weight_ih_l0'].shape)} is neither a GRU's "
            f"[3 * {hidden}, n] nor an LSTM's [4 * {hidden}, n]"
        )
    for k in range(layers):
        width = params["weight_ih_l0"].shape[1] if k == 0 else hidden
        shapes = {
            f"weight_ih_l{k}": (gates * hidden, width),
            f"weight_hh_l{k}": (gates * hidden, hidden),
            f"bias_ih_l{k}": (gates * hidden,),
            f"bias_hh_l{k}": (gates * hidden,),
        }
        for name, shape in shapes.items():
            if tuple(params[name].shape) != shape:
                refuse_layout(
                    f"{where}: {prefix}{name} is {list(params[name].shape)}, expected {list(shape)} "
                    f"({kind.upper()} of hidden size {hidden})"
                )
    return Recurrent(kind, params["weight_ih_l0"].shape[1], hidden, layers, params)


def check_rnn_config(recurrent: Recurrent, model: Mapping[str, Any], section: str) -> None:
    """The config's rnn settings, where given, must be what the weights are."""
    hidden = config_entry(model, "rnn_hidden_dim")
    given = {
        "rnn_type": config_entry(model, "rnn_type"),
        "rnn_hidden_dim": hidden if hidden is not None else config_entry(model, "rnn_hidden_size"),
        "rnn_num_layers": config_entry(model, "rnn_num_layers"),
    }
    found = {
        "rnn_type": recurrent.kind,
        "rnn_hidden_dim": recurrent.hidden_size,
        "rnn_num_layers": recurrent.num_layers,
    }
    for key, value in given.items():
        if value is None:
            continue
        mine = found[key]
        if (value.lower() if isinstance(value, str) else value) != mine:
            refuse_layout(
                f"agent config {section}.{key} is {value!r} but the checkpoint's recurrent layer has {mine!r}"
            )
