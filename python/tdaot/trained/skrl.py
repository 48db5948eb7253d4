"""``tdaot.from_skrl``: a skrl 2.x run (or checkpoint) as a tensordict policy tdaot builds.

skrl's agents save ``checkpoints/agent_<timestep>.pt``: a dict of state dicts by module name
(``policy``, ``value``, ``optimizer``, ``observation_preprocessor``, ...). The policy's network
is not in the file: skrl's ``Runner`` (which Isaac Lab's skrl scripts use) instantiates it from
the run's config, ``params/agent.yaml`` as Isaac Lab dumps it, so that is read too:

* ``models.separate`` false (Isaac Lab's default): one shared model, ``net_container.N.*`` then
  ``policy_layer.*`` (the mean) beside ``value_layer.*``; true: the policy's own model,
  ``net_container.N.*`` whose last Linear is the mean.
* ``models.policy.network``: one container on ``OBSERVATIONS``, its ``layers`` (Linear sizes)
  and ``activations``; ``models.policy.output`` ``ACTIONS`` or ``tanh(ACTIONS)``.
* ``observation_preprocessor`` in the checkpoint: skrl's RunningStandardScaler,
  ``clamp((x - mean) / (sqrt(var) + 1e-8), -5, 5)`` (epsilon and clip_threshold from
  ``agent.observation_preprocessor_kwargs`` where given).

The deterministic action is what skrl's trainers evaluate with: ``mean_actions`` of the Gaussian
policy. Recurrent skrl models (RNN/GRU/LSTM) are custom classes, not the Runner's instantiators:
they are refused by name, as is any layout or config entry tdaot does not rebuild.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
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
    linear_pair,
    load_tensors,
    load_yaml_mapping,
    number,
    refuse,
    state_dict,
    take,
    vector,
)

LIBRARY = "skrl"
_CHECKPOINT = re.compile(r"agent_(\d+)\.pt")
# skrl.utils.model_instantiators.torch.common._get_activation_function's names.
ACTIVATIONS = {
    "elu": nn.ELU,
    "leaky_relu": nn.LeakyReLU,
    "relu": nn.ReLU,
    "selu": nn.SELU,
    "sigmoid": nn.Sigmoid,
    "softmax": lambda: nn.Softmax(dim=1),
    "softplus": nn.Softplus,
    "softsign": nn.Softsign,
    "tanh": nn.Tanh,
}
POLICY_CLASSES = ("GaussianMixin", "MultivariateGaussianMixin", "DeterministicMixin")
_RECURRENT_KEYS = ("weight_ih_l0", "weight_hh_l0")


def find_checkpoint(source: Path) -> tuple[Path, Path, str]:
    """(checkpoint file, run directory, how it was chosen) for a run directory, its
    ``checkpoints`` folder or a checkpoint file."""
    if source.is_file():
        run = source.parent.parent if source.parent.name == "checkpoints" else source.parent
        return source, run, "the file given"
    if not source.is_dir():
        refuse(f"'{source}' is neither a skrl run directory nor a checkpoint file")
    folder = source / "checkpoints" if (source / "checkpoints").is_dir() else source
    run = folder.parent if folder.name == "checkpoints" else folder
    steps = {}
    for entry in folder.iterdir():
        match = _CHECKPOINT.fullmatch(entry.name)
        if match and entry.is_file():
            steps[int(match.group(1))] = entry
    if steps:
        return steps[max(steps)], run, f"the highest timestep of {len(steps)} agent_<t>.pt"
    best = folder / "best_agent.pt"
    if best.is_file():
        return best, run, "best_agent.pt (no agent_<t>.pt saved)"
    refuse(
        f"skrl run directory '{source}' has no checkpoints/agent_<timestep>.pt nor best_agent.pt "
        "(skrl's agents save them under the experiment's checkpoints/ folder)"
    )


def config_for(run: Path, agent, checkpoint: Path) -> Mapping[str, Any]:
    """The run config: ``agent`` (a path or the dict), else the run's ``params/agent.yaml``."""
    if isinstance(agent, Mapping):
        return agent
    if agent is None:
        agent = run / "params" / "agent.yaml"
        if not Path(agent).is_file():
            refuse(
                f"skrl checkpoint '{checkpoint}' has no params/agent.yaml in its run '{run}' (the config "
                "Isaac Lab dumps there; skrl's checkpoints hold weights, not the network's layout); "
                "give agent= (its path or the dict)"
            )
    return load_yaml_mapping(Path(agent), "skrl runner config")


def _section(config: Mapping[str, Any], path: str) -> Any:
    value: Any = config
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            refuse(f"the skrl config has no {path!r} (expected as in Isaac Lab's skrl agent.yaml)")
        value = value[part]
    return value


def _linear_sizes(network: Mapping[str, Any]) -> list[int]:
    layers = network.get("layers")
    if not isinstance(layers, list) or not layers:
        refuse(f"skrl config models.policy.network[0].layers is {layers!r}, expected a list of Linear sizes")
    sizes = []
    for index, layer in enumerate(layers):
        if isinstance(layer, Mapping) and set(layer) == {"linear"}:
            layer = layer["linear"]
            if isinstance(layer, Mapping):
                layer = layer.get("out_features", layer.get("features"))
        if isinstance(layer, bool) or not isinstance(layer, int):
            refuse(
                f"skrl config models.policy.network[0].layers[{index}] is {layers[index]!r}: tdaot rebuilds "
                "Linear layers (a size or {linear: size}), not convolution or flatten layers"
            )
        sizes.append(layer)
    return sizes


def _activations(network: Mapping[str, Any], count: int) -> list[str]:
    given = network.get("activations", [])
    if isinstance(given, str):
        names = [given] * count
    elif isinstance(given, list) and len(given) in (0, 1, count):
        names = [""] * count if not given else (given * count if len(given) == 1 else list(given))
    else:
        refuse(
            f"skrl config models.policy.network[0].activations is {given!r}: expected a name or a list of "
            f"1 or {count} names"
        )
    for name in names:
        if name not in ("", None) and str(name).lower() not in ACTIVATIONS:
            refuse(
                f"skrl config models.policy.network[0].activations has {name!r}, not one of skrl's "
                f"activations: {', '.join(ACTIVATIONS)}"
            )
    return [str(n).lower() if n else "" for n in names]


def _output(policy: Mapping[str, Any]) -> bool:
    """Whether the policy's output expression squashes (tanh) the mean."""
    output = str(policy.get("output", "ACTIONS")).replace(" ", "")
    if output == "ACTIONS":
        return False
    if output == "tanh(ACTIONS)":
        return True
    refuse(
        f"skrl config models.policy.output is {policy.get('output')!r}; tdaot rebuilds ACTIONS and "
        f"tanh(ACTIONS)"
    )


def _modules(activations, linears) -> list[nn.Module]:
    modules: list[nn.Module] = []
    for (weight, bias), activation in zip(linears, [*activations, ""]):
        linear = nn.Linear(weight.shape[1], weight.shape[0], dtype=weight.dtype)
        linear.load_state_dict({"weight": weight, "bias": bias})
        modules.append(linear)
        if activation:
            modules.append(ACTIVATIONS[activation]())
    return modules


def _pop_linear(state: dict[str, torch.Tensor], prefix: str, where: str):
    pair = linear_pair(state, prefix, where)
    del state[prefix + "weight"], state[prefix + "bias"]
    return pair


def _hidden_layers(
    state: dict[str, torch.Tensor], container: str, sizes, activations, where
) -> tuple[list, int]:
    """The container's Linear layers at the indices skrl's Sequential gives them (an activation
    module after a layer shifts the next one's index by two, none by one)."""
    linears, index = [], 0
    for position, size in enumerate(sizes):
        pair = _pop_linear(state, f"{container}{index}.", where)
        if pair[0].shape[0] != size:
            refuse(
                f"{where}: {container}{index}.weight has {pair[0].shape[0]} outputs but the config's layer "
                f"{position} has {size}"
            )
        linears.append(pair)
        index += 2 if activations[position] else 1
    return linears, index


def read_policy(checkpoint: Any, config: Mapping[str, Any], source: str) -> ActorSpec:
    """The deterministic actor of a skrl checkpoint (the loaded dict) under its runner config."""
    state = entry_state_dict(
        checkpoint,
        "policy",
        "a skrl agent checkpoint",
        "'value', 'optimizer', 'observation_preprocessor', ...: a state dict per module",
    )
    if any(key.endswith(_RECURRENT_KEYS) for key in state):
        rnn = sorted(k for k in state if k.endswith(_RECURRENT_KEYS))
        refuse(
            f"skrl checkpoint 'policy' holds a recurrent layer ({key_names(rnn)}): skrl's RNN/GRU/LSTM "
            f"models "
            "are custom classes, not its Runner's instantiators, and tdaot does not rebuild them"
        )
    models = _section(config, "models")
    policy = _section(config, "models.policy")
    if not isinstance(policy, Mapping):
        refuse(f"skrl config models.policy is {policy!r}, not a mapping")
    cls = policy.get("class")
    if cls not in POLICY_CLASSES:
        refuse(f"skrl config models.policy.class is {cls!r}; tdaot rebuilds {', '.join(POLICY_CLASSES)}")
    for flag in (
        ("clip_mean_actions", "clip_actions") if cls == "DeterministicMixin" else ("clip_mean_actions",)
    ):
        if policy.get(flag):
            refuse(
                f"skrl config models.policy.{flag} is true: it clamps to the environment's action space, "
                "which the run's files do not hold"
            )
    network = policy.get("network")
    if not isinstance(network, list) or len(network) != 1 or not isinstance(network[0], Mapping):
        refuse(
            f"skrl config models.policy.network is {network!r}: tdaot rebuilds one container (a list of one "
            "{name, input, layers, activations})"
        )
    container_cfg = network[0]
    if str(container_cfg.get("input", "")).replace(" ", "") not in ("OBSERVATIONS", "observations"):
        refuse(
            f"skrl config models.policy.network[0].input is {container_cfg.get('input')!r}; tdaot rebuilds "
            "networks on OBSERVATIONS (skrl 2.x; STATES are the critic's privileged states there)"
        )
    name = container_cfg.get("name", "net")
    sizes = _linear_sizes(container_cfg)
    activations = _activations(container_cfg, len(sizes))
    squash = _output(policy)
    separate = models.get("separate", True)
    where = "skrl checkpoint 'policy'"
    container = f"{name}_container."
    if not any(key.startswith(container) for key in state):
        refuse(f"{where}: no {container}* keys (found {key_names(state)}) for the config's network {name!r}")
    linears, index = _hidden_layers(state, container, sizes, activations, where)
    if separate:
        mean = _pop_linear(state, f"{container}{index}.", where)
        expected = f"{container}N.* ({len(sizes)} layers and the output), log_std_parameter"
    else:
        mean = _pop_linear(state, "policy_layer.", where)
        take(state, "value_layer.")
        expected = f"{container}N.*, policy_layer.*, value_layer.*, log_std_parameter (a shared model)"
    state.pop("log_std_parameter", None)
    check_unknown(state, where, expected)
    if mean[0].shape[1] != linears[-1][0].shape[0]:
        refuse(
            f"{where}: the output layer takes {mean[0].shape[1]} features but the MLP gives "
            f"{linears[-1][0].shape[0]}"
        )
    obs_dim = linears[0][0].shape[1]
    normalizer = _normalizer(checkpoint, config, obs_dim)
    modules = _modules(activations, [*linears, mean])
    return ActorSpec(
        library=LIBRARY,
        source=source,
        modules=modules,
        obs_dim=obs_dim,
        num_actions=mean[0].shape[0],
        normalizer=normalizer,
        squash=squash,
        notes=(f"{'separate' if separate else 'shared'} model", *(("tanh output",) if squash else ())),
    )


def _normalizer(checkpoint: Mapping[str, Any], config: Mapping[str, Any], obs_dim: int):
    if "observation_preprocessor" not in checkpoint:
        if "state_preprocessor" in checkpoint:
            refuse(
                "skrl checkpoint has 'state_preprocessor' but no 'observation_preprocessor': in skrl 2.x the "
                "state preprocessor normalises the critic's states, in 1.4.x it normalised observations; "
                "tdaot reads skrl 2.x checkpoints"
            )
        return None
    where = "skrl checkpoint 'observation_preprocessor'"
    buffers = state_dict(checkpoint["observation_preprocessor"], where)
    expected = {"running_mean", "running_variance", "current_count"}
    if set(buffers) != expected:
        refuse(f"{where}: keys {key_names(buffers)}; expected {key_names(expected)} (RunningStandardScaler)")
    agent = config.get("agent") if isinstance(config.get("agent"), Mapping) else {}
    kwargs = agent.get("observation_preprocessor_kwargs") or {}
    if not isinstance(kwargs, Mapping):
        refuse(f"skrl config agent.observation_preprocessor_kwargs is {kwargs!r}, not a mapping")
    epsilon = number(kwargs.get("epsilon", 1e-8), "skrl config agent.observation_preprocessor_kwargs.epsilon")
    clip = number(
        kwargs.get("clip_threshold", 5.0), "skrl config agent.observation_preprocessor_kwargs.clip_threshold"
    )
    mean = vector(buffers["running_mean"], obs_dim, f"{where} running_mean")
    var = vector(buffers["running_variance"], obs_dim, f"{where} running_variance")
    # RunningStandardScaler._compute: (x - mean.float()) / (sqrt(var.float()) + epsilon), clamped.
    return ObservationNormalizer(mean.float(), torch.sqrt(var.float()) + epsilon, clip)


def from_skrl(
    source: str | os.PathLike, *, agent: str | os.PathLike | Mapping[str, Any] | None = None
) -> tuple[MlpActor, TensorDict]:
    """The deterministic actor of a skrl run and an example TensorDict of batch 1.

    ``source``: a run directory (its ``checkpoints/agent_<t>.pt`` of the highest timestep is
    taken, numerically), its ``checkpoints`` folder, or one checkpoint file. ``agent``: the
    runner config (a path or the dict), else the run's ``params/agent.yaml``. The policy's
    ``source`` attribute (and its repr) names the file taken.
    """
    checkpoint, run, how = find_checkpoint(Path(source))
    config = config_for(run, agent, checkpoint)
    spec = read_policy(load_tensors(checkpoint, LIBRARY), config, str(checkpoint))
    policy = MlpActor(dataclasses.replace(spec, chosen=how))
    return policy, policy.example(1)
