"""``tdaot.from_rl_games``: an rl_games 1.6 run (or checkpoint) as a tensordict policy tdaot builds.

rl_games saves ``nn/<config name>.pth`` (its best) and ``nn/last_<name>_ep_<N>_rew_<R>.pth``:
a dict with ``model`` (the model's state dict, every key prefixed ``_orig_mod.`` when rl_games
compiled the model), ``epoch``, ``optimizer``, ... The network's layout is in the run's config,
``params/agent.yaml`` as Isaac Lab dumps it (rl_games' own ``params``):

* ``params.network``: ``actor_critic`` with a ``space.continuous`` head (``mu_activation``),
  ``mlp.units`` and ``mlp.activation``: ``a2c_network.actor_mlp.{0,2,..}.*`` (an activation
  after every Linear), then ``a2c_network.mu.*``; ``a2c_network.sigma`` is the std, unused.
* ``params.config.normalize_input``: ``running_mean_std.running_mean / running_var / count``
  in ``model``: ``clamp((x - mean) / sqrt(var + 1e-5), -5, 5)``.
* ``params.config.clip_actions`` (rl_games' player, default true): the mean clamped to ±1 and
  rescaled to the action space, which Isaac Lab's wrapper makes ``±params.env.clip_actions``;
  Isaac Lab's wrapper also clamps observations to ``±params.env.clip_observations``.

* ``params.network.rnn`` (``lstm`` / ``gru``, ``units``, ``layers``, ``before_mlp``,
  ``layer_norm``): ``a2c_network.rnn.rnn.*`` (``a_rnn`` when separate) before the MLP or between
  it and ``mu``, then ``a2c_network.layer_norm``; its state carried as ``recurrent_state_h`` /
  ``recurrent_state_c`` (LSTM) or ``recurrent_state`` (GRU), zeroed where ``is_init`` is true,
  as the player zeroes a finished environment's state.

The deterministic action is the player's ``get_action(obs, is_deterministic=True)``. CNNs, D2RL
MLPs, an RNN's ``concat_input`` / ``concat_output``, discrete and SAC heads are refused by name.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict
from torch import nn

from tdaot.trained.mlp_actor import ActorSpec, MlpActor, ObservationNormalizer
from tdaot.trained.trainer_files import (
    check_unknown,
    entry_state_dict,
    key_names,
    linear_chain,
    linear_pair,
    load_tensors,
    load_yaml_mapping,
    number,
    refuse,
    rnn_layer,
    take,
    vector,
)

LIBRARY = "rl_games"
COMPILED_PREFIX = "_orig_mod."
NORMALIZER_EPS = 1e-5  # RunningMeanStd's epsilon, which the model builders keep
NORMALIZER_CLIP = 5.0
# rl_games.algos_torch.network_builder.NetworkBuilder.BaseNetwork's activations_factory.
ACTIVATIONS = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
    "elu": nn.ELU,
    "selu": nn.SELU,
    "swish": nn.SiLU,
    "gelu": nn.GELU,
    "softplus": nn.Softplus,
    "None": nn.Identity,
}
MODELS = ("continuous_a2c_logstd", "continuous_a2c")


def find_checkpoint(source: Path, agent) -> tuple[Path, Mapping[str, Any], str]:
    """(checkpoint file, config, how the file was chosen) for a run directory or a .pth file."""
    if source.is_file():
        run = source.parent.parent if source.parent.name == "nn" else source.parent
        return source, _config(run, agent, source), "the file given"
    if not source.is_dir():
        refuse(f"'{source}' is neither an rl_games run directory nor a checkpoint file")
    config = _config(source, agent, source)
    name = _get(config, "params.config.name")
    if not isinstance(name, str) or not name:
        refuse(f"rl_games config params.config.name is {name!r}, expected the run's name (nn/<name>.pth)")
    chosen = source / "nn" / f"{name}.pth"
    if not chosen.is_file():
        found = sorted(p.name for p in (source / "nn").glob("*.pth")) if (source / "nn").is_dir() else []
        refuse(
            f"rl_games run directory '{source}' has no nn/{name}.pth (the best checkpoint of config name "
            f"{name!r}, which Isaac Lab's play loads); .pth files in nn/: {key_names(found)}; name one "
            f"instead"
        )
    return chosen, config, "nn/<params.config.name>.pth, the best save"


def _config(run: Path, agent, where: Path) -> Mapping[str, Any]:
    if isinstance(agent, Mapping):
        return agent
    if agent is None:
        agent = run / "params" / "agent.yaml"
        if not agent.is_file():
            refuse(
                f"rl_games checkpoint '{where}' has no params/agent.yaml in run '{run}' (the config Isaac "
                f"Lab "
                "dumps there: rl_games' checkpoints hold weights, not the network's layout); give agent= "
                "(its path or the params dict)"
            )
    return load_yaml_mapping(Path(agent), "rl_games config")


_MISSING = object()


def _get(config: Mapping[str, Any], path: str, default: Any = _MISSING) -> Any:
    value: Any = config
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            if default is not _MISSING:
                return default
            refuse(f"the rl_games config has no {path!r} (expected as in Isaac Lab's rl_games agent.yaml)")
        value = value[part]
    return value


def _activation(name: Any, where: str) -> nn.Module:
    key = "None" if name is None else str(name)
    if key not in ACTIVATIONS:
        refuse(
            f"rl_games config {where} is {name!r}, not one of rl_games' activations: {', '.join(ACTIVATIONS)}"
        )
    return ACTIVATIONS[key]()


def _network(config: Mapping[str, Any]) -> Mapping[str, Any]:
    network = _get(config, "params.network")
    if not isinstance(network, Mapping):
        refuse(f"rl_games config params.network is {network!r}, not a mapping")
    model = _get(config, "params.model.name", "continuous_a2c_logstd")
    if model not in MODELS:
        refuse(f"rl_games config params.model.name is {model!r}; tdaot rebuilds {', '.join(MODELS)}")
    if network.get("name", "actor_critic") != "actor_critic":
        refuse(f"rl_games config params.network.name is {network.get('name')!r}; tdaot rebuilds actor_critic")
    if "cnn" in network:
        refuse("rl_games config params.network.cnn is set: tdaot rebuilds MLP actors, not rl_games' CNNs")
    space = network.get("space")
    if not isinstance(space, Mapping) or "continuous" not in space:
        kinds = key_names(space) if isinstance(space, Mapping) else repr(space)
        refuse(
            f"rl_games config params.network.space is {kinds}; tdaot rebuilds the 'continuous' action head"
        )
    mlp = network.get("mlp")
    if not isinstance(mlp, Mapping):
        refuse(f"rl_games config params.network.mlp is {mlp!r}, not a mapping")
    if mlp.get("d2rl"):
        refuse("rl_games config params.network.mlp.d2rl is true: tdaot does not rebuild D2RL MLPs")
    return network


def _model_state(checkpoint: Any) -> dict[str, torch.Tensor]:
    state = entry_state_dict(
        checkpoint, "model", "an rl_games checkpoint", "'epoch', 'optimizer', ...: what rl_games' agents save"
    )
    # rl_games compiles its model (torch.compile) and saves the compiled module's keys.
    return {k[len(COMPILED_PREFIX) :] if k.startswith(COMPILED_PREFIX) else k: v for k, v in state.items()}


def read_policy(
    checkpoint: Any,
    config: Mapping[str, Any],
    source: str,
    action_range: tuple[Sequence[float] | float, Sequence[float] | float] | None = None,
) -> ActorSpec:
    """The deterministic actor of an rl_games checkpoint (the loaded dict) under its config."""
    state = _model_state(checkpoint)
    network = _network(config)
    where = "rl_games checkpoint 'model'"
    rnn, rnn_norm, before_mlp = _recurrent(network, state, where)
    running = take(state, "running_mean_std.")
    take(state, "value_mean_std.")
    layers = linear_chain(take(state, "a2c_network.actor_mlp."), "a2c_network.actor_mlp.", where)
    mu = linear_pair(state, "a2c_network.mu.", where)
    heads = ("mu.weight", "mu.bias", "sigma", "sigma.weight", "sigma.bias", "value.weight", "value.bias")
    for key in heads:
        state.pop(f"a2c_network.{key}", None)
    take(state, "a2c_network.critic_mlp.")
    check_unknown(
        state,
        where,
        "running_mean_std.*, value_mean_std.*, a2c_network.actor_mlp.N.*, a2c_network.mu.*, "
        "a2c_network.sigma, a2c_network.value.*, a2c_network.critic_mlp.N.*, a2c_network.rnn.rnn.* and "
        "a2c_network.layer_norm.* (a_rnn, a_layer_norm, c_rnn, c_layer_norm when separate) (each maybe "
        "prefixed _orig_mod.)",
    )
    units = network["mlp"].get("units")
    if units != [w.shape[0] for w, _ in layers]:
        refuse(
            f"rl_games config params.network.mlp.units is {units!r} but the checkpoint's actor_mlp has "
            f"{[w.shape[0] for w, _ in layers]}"
        )
    gives = layers[-1][0].shape[0] if rnn is None or before_mlp else rnn.hidden_size
    if mu[0].shape[1] != gives:
        refuse(f"{where}: a2c_network.mu takes {mu[0].shape[1]} features but the layer before gives {gives}")
    if rnn is not None:
        takes, given = (layers[0][0].shape[1], rnn.hidden_size) if before_mlp else (rnn.input_size, units[-1])
        if takes != given:
            refuse(
                f"{where}: the {'actor_mlp' if before_mlp else 'RNN'} takes {takes} features but gets {given}"
            )
    modules: list[nn.Module] = []
    for weight, bias in [*layers, mu]:
        linear = nn.Linear(weight.shape[1], weight.shape[0], dtype=weight.dtype)
        linear.load_state_dict({"weight": weight, "bias": bias})
        modules.append(linear)
        modules.append(_activation(network["mlp"].get("activation"), "params.network.mlp.activation"))
    modules[-1] = _activation(network["space"]["continuous"].get("mu_activation", "None"),
                              "params.network.space.continuous.mu_activation")  # fmt: skip
    obs_dim = rnn.input_size if rnn is not None and before_mlp else layers[0][0].shape[1]
    actions = mu[0].shape[0]
    normalizer = _normalizer(running, config, obs_dim)
    spec = ActorSpec(
        library=LIBRARY, source=source, modules=modules, obs_dim=obs_dim, num_actions=actions,
        normalizer=normalizer, rnn=rnn, rnn_at=0 if before_mlp else 2 * len(layers), rnn_norm=rnn_norm,
    )  # fmt: skip
    return _post_processing(spec, config, action_range)


def _recurrent(network: Mapping[str, Any], state: dict[str, torch.Tensor], where: str):
    """(the actor's LSTM or GRU, its LayerNorm, whether it runs before the MLP), or Nones."""
    separate = bool(network.get("separate", False))
    prefix, norm = ("a2c_network.a_rnn.rnn.", "a2c_network.a_layer_norm.") if separate else (
        "a2c_network.rnn.rnn.", "a2c_network.layer_norm.")  # fmt: skip
    config = network.get("rnn")
    if config is None:
        found = [k for k in state if "rnn" in k or "layer_norm" in k]
        if found:
            refuse(f"{where} holds {key_names(found)} but the config has no params.network.rnn")
        return None, None, False
    config = _mapping_of(config, "params.network.rnn")
    name = config.get("name")
    if name not in ("lstm", "gru"):
        refuse(f"rl_games config params.network.rnn.name is {name!r}; tdaot rebuilds lstm and gru")
    for flag in ("concat_input", "concat_output"):
        if config.get(flag):
            refuse(f"rl_games config params.network.rnn.{flag} is true: tdaot does not rebuild it")
    rnn = rnn_layer(take(state, prefix), prefix, where)
    if separate:
        take(state, "a2c_network.c_rnn.rnn.")
        take(state, "a2c_network.c_layer_norm.")
    kind = "lstm" if isinstance(rnn, nn.LSTM) else "gru"
    if (
        kind != name
        or rnn.hidden_size != config.get("units", rnn.hidden_size)
        or rnn.num_layers != config.get("layers", 1)
    ):
        refuse(
            f"rl_games config params.network.rnn is {dict(config)!r} but {where} {prefix}* is a {kind} of "
            f"{rnn.num_layers} layers, {rnn.hidden_size} units"
        )
    layer_norm = None
    norm_params = take(state, norm)
    if bool(config.get("layer_norm", False)) != bool(norm_params):
        refuse(f"rl_games config params.network.rnn.layer_norm is {config.get('layer_norm')!r} but {where} "
               f"{'has' if norm_params else 'has no'} {norm}* entries")  # fmt: skip
    if norm_params:
        layer_norm = nn.LayerNorm(rnn.hidden_size)
        try:
            layer_norm.load_state_dict(norm_params)
        except RuntimeError as err:
            refuse(f"{where}: {norm}* is not a LayerNorm of {rnn.hidden_size}: {err}")
    return rnn, layer_norm, bool(config.get("before_mlp", False))


def _mapping_of(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        refuse(f"rl_games config {where} is {value!r}, not a mapping")
    return value


def _normalizer(running: dict[str, torch.Tensor], config: Mapping[str, Any], obs_dim: int):
    flag = _get(config, "params.config.normalize_input", None)
    where = "rl_games checkpoint 'model' running_mean_std"
    if flag is not None and bool(flag) != bool(running):
        has = "has" if running else "has no"
        refuse(
            f"rl_games config params.config.normalize_input is {flag!r} but the checkpoint {has} "
            f"running_mean_std.* entries"
        )
    if not running:
        return None
    expected = {"running_mean", "running_var", "count"}
    if set(running) != expected:
        refuse(f"{where}: keys {key_names(running)}; expected {key_names(expected)} (RunningMeanStd)")
    mean = vector(running["running_mean"], obs_dim, f"{where}.running_mean")
    var = vector(running["running_var"], obs_dim, f"{where}.running_var")
    # RunningMeanStd.forward: (x - mean.float()) / sqrt(var.float() + epsilon), clamped to ±5.
    return ObservationNormalizer(mean.float(), torch.sqrt(var.float() + NORMALIZER_EPS), NORMALIZER_CLIP)


def _bounds(value, actions: int, where: str) -> torch.Tensor:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return torch.full((actions,), float(value))
    if isinstance(value, Sequence) and len(value) == actions:
        return torch.tensor([number(v, where) for v in value], dtype=torch.float32)
    refuse(f"{where} is {value!r}: expected a number or {actions} numbers")


def _post_processing(spec: ActorSpec, config: Mapping[str, Any], action_range) -> ActorSpec:
    notes = []
    clip_obs = _get(config, "params.env.clip_observations", None)
    obs_clip = None
    if clip_obs is not None:
        obs_clip = number(clip_obs, "rl_games config params.env.clip_observations")
        if math.isinf(obs_clip):
            obs_clip = None
        else:
            notes.append(f"observations clipped to +-{obs_clip:g}")
    rescale = None
    if _get(config, "params.config.clip_actions", True):
        if action_range is None:
            clip = _get(config, "params.env.clip_actions", None)
            if clip is None:
                refuse(
                    "rl_games' player clamps the action to [-1, 1] and rescales it to the environment's "
                    "action space (params.config.clip_actions is true, its default), but the run's files do "
                    "not say that space: the config has no params.env.clip_actions (Isaac Lab's wrapper "
                    "makes the space +-clip_actions); give action_range=(low, high)"
                )
            clip = number(clip, "rl_games config params.env.clip_actions")
            if not math.isfinite(clip) or clip <= 0:
                refuse(
                    f"rl_games config params.env.clip_actions is {clip!r}: the player's rescale needs a "
                    f"finite bound"
                )
            action_range = (-clip, clip)
        low = _bounds(action_range[0], spec.num_actions, "action_range low")
        high = _bounds(action_range[1], spec.num_actions, "action_range high")
        if not bool(torch.isfinite(low).all() and torch.isfinite(high).all() and (low < high).all()):
            refuse(f"action_range {action_range!r}: expected finite low < high")
        # players.rescale_actions: action * (high - low) / 2 + (high + low) / 2.
        rescale = ((high - low) / 2.0, (high + low) / 2.0, True)
        notes.append(f"action clamped to +-1, rescaled to [{low.min().item():g}, {high.max().item():g}]")
    return dataclasses.replace(spec, obs_clip=obs_clip, rescale=rescale, notes=tuple(notes))


def from_rl_games(
    source: str | os.PathLike,
    *,
    agent: str | os.PathLike | Mapping[str, Any] | None = None,
    action_range: tuple[Sequence[float] | float, Sequence[float] | float] | None = None,
) -> tuple[MlpActor, TensorDict]:
    """The deterministic actor of an rl_games run and an example TensorDict of batch 1.

    ``source``: a run directory (``nn/<params.config.name>.pth`` is taken, the best save Isaac
    Lab's play loads) or one ``.pth`` file. ``agent``: the config (a path to agent.yaml or the
    dict with its ``params``), else the run's ``params/agent.yaml``. ``action_range``: the
    environment's action space (low, high) for the player's rescale, where the config has no
    ``params.env.clip_actions``. The policy's ``source`` attribute names the file taken.
    """
    checkpoint, config, how = find_checkpoint(Path(source), agent)
    spec = read_policy(load_tensors(checkpoint, LIBRARY), config, str(checkpoint), action_range)
    policy = MlpActor(dataclasses.replace(spec, chosen=how))
    return policy, policy.example(1)
