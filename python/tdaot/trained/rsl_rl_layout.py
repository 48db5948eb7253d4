"""What an rsl_rl checkpoint and its agent config say about the actor, read as data.

:func:`read_actor` turns a checkpoint's dict (``torch.load`` of ``model_<iter>.pt``) and the
runner config (``params/agent.yaml``) into an :class:`ActorLayout`: the MLP's layers, the
activation, the observation normalizer, the recurrent layer and how the action mean is taken
from the MLP's output. It builds no module and imports nothing of rsl_rl; the layouts known are
those rsl_rl's runners write:

* 2.x-3.x: ``{"model_state_dict", "optimizer_state_dict", "iter", "infos"}`` with the
  ``ActorCritic`` / ``ActorCriticRecurrent`` keys ``actor.N.*``, ``std`` or ``log_std``,
  ``actor_obs_normalizer.*`` (3.x), ``memory_a.rnn.*``; 2.x keeps its normalizer beside the
  model (``obs_norm_state_dict``). The config's model is ``policy``.
* 4.x-5.x: ``{"actor_state_dict", "critic_state_dict", ...}`` with the ``MLPModel`` /
  ``RNNModel`` keys ``mlp.N.*``, ``obs_normalizer.*``, ``rnn.rnn.*`` and the std as ``std`` /
  ``log_std`` (4.x) or ``distribution.std_param`` / ``distribution.log_std_param`` (5.x). The
  config's model is ``actor``.

Anything else is refused with an InvalidArgumentError naming the keys found and those expected.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from tdaot.trained.rsl_rl_parts import (
    Normalizer,
    Recurrent,
    check_rnn_config,
    config_entry,
    key_list,
    read_mlp,
    read_normalizer,
    read_recurrent,
    refuse_layout,
    take_prefixed,
)

# rsl_rl.utils.resolve_nn_activation's names (rsl-rl-lib 2.x-5.x); the module each builds.
ACTIVATIONS = ("elu", "selu", "relu", "crelu", "lrelu", "tanh", "sigmoid", "softplus", "gelu", "swish",
               "mish", "identity")  # fmt: skip


@dataclass(frozen=True)
class ActorLayout:
    """Everything the deterministic actor needs; ``head`` says how the action is taken from the
    MLP's output: "identity", "mean_half" (a state-dependent std: the first half is the mean)
    or "beta" (the Beta distribution's mean rescaled to ``beta_range``)."""

    generation: str  # "2.x-3.x" or "4.x-5.x"
    model_class: str
    obs_groups: tuple[str, ...]
    obs_dim: int
    num_actions: int
    activation: str
    layers: tuple[tuple[torch.Tensor, torch.Tensor], ...]  # (weight, bias) of each Linear
    normalizer: Normalizer | None
    recurrent: Recurrent | None
    head: str = "identity"
    beta_range: tuple[float, float] = (-1.0, 1.0)
    # The runner config's clip_actions: Isaac Lab's and mjlab's RslRlVecEnvWrapper clamp every
    # action the actor gives to [-clip_actions, clip_actions] before the environment sees it.
    clip_actions: float | None = None


def _short_class(name: Any, where: str) -> str:
    """rsl_rl resolves "MLPModel", "rsl_rl.models.MLPModel" and "rsl_rl.models:MLPModel" alike."""
    if not isinstance(name, str) or not name:
        refuse_layout(f"{where}: class_name {name!r} is not a class name")
    return re.split(r"[.:]", name)[-1]


def read_actor(checkpoint: Mapping[str, Any], config: Mapping[str, Any]) -> ActorLayout:
    """The actor of an rsl_rl checkpoint (the loaded dict) under its runner config (agent.yaml)."""
    if not isinstance(checkpoint, Mapping):
        refuse_layout(f"the checkpoint is a {type(checkpoint).__name__}, not the dict rsl_rl's runner saves")
    if not isinstance(config, Mapping):
        refuse_layout(
            f"the agent config is a {type(config).__name__}, not a mapping (agent.yaml's top level)"
        )
    if "actor_state_dict" in checkpoint:
        return _read_new(checkpoint["actor_state_dict"], config)
    if "model_state_dict" in checkpoint:
        return _read_old(checkpoint, config)
    refuse_layout(
        f"not an rsl_rl checkpoint layout tdaot knows: top-level keys {key_list(checkpoint)}; expected "
        "'actor_state_dict' (rsl_rl 4.x-5.x) or 'model_state_dict' (rsl_rl 2.x-3.x)"
    )


def _state_dict(value: Any, where: str) -> dict[str, torch.Tensor]:
    if not isinstance(value, Mapping) or not all(isinstance(v, torch.Tensor) for v in value.values()):
        refuse_layout(f"the checkpoint's {where!r} is not a state dict (names to tensors)")
    return dict(value)


def _model_config(config: Mapping[str, Any], section: str, known: tuple[str, ...], generation: str):
    model = config.get(section)
    if not isinstance(model, Mapping):
        refuse_layout(
            f"the agent config has no {section!r} section for an rsl_rl {generation} checkpoint "
            f"(its top-level keys: {key_list(config)}); expected {section!r} with class_name one of "
            f"{', '.join(known)}"
        )
    name = _short_class(model.get("class_name"), f"agent config {section!r}")
    if name not in known:
        refuse_layout(
            f"agent config {section}.class_name {model.get('class_name')!r} is not a model tdaot rebuilds; "
            f"expected one of {', '.join(known)}"
        )
    return model, name


def _activation(model: Mapping[str, Any], section: str) -> str:
    activation = model.get("activation", "elu")  # every rsl_rl model's default
    if not isinstance(activation, str) or activation.lower() not in ACTIVATIONS:
        refuse_layout(
            f"agent config {section}.activation {activation!r} is not one of rsl_rl's activations: "
            f"{', '.join(ACTIVATIONS)}"
        )
    return activation.lower()


def _obs_groups(config: Mapping[str, Any], obs_set: str, generation: str) -> tuple[str, ...]:
    groups = config_entry(config, "obs_groups")
    if groups is None or (generation == "2.x-3.x" and isinstance(groups, Mapping) and obs_set not in groups):
        # rsl_rl 2.x has no groups (Isaac Lab's "policy" group is the actor's observation); 3.x
        # falls back to the "policy" group for a missing "policy" set, and 4.x-5.x to it for a
        # missing "actor" set when the environment has no "actor" group (Isaac Lab's envs have
        # "policy"). Isaac Lab's agent.yaml carries ``obs_groups: {}`` where a task sets none.
        return ("policy",)
    if not isinstance(groups, Mapping) or obs_set not in groups:
        found = key_list(groups) if isinstance(groups, Mapping) else repr(groups)
        refuse_layout(
            f"agent config obs_groups has no {obs_set!r} set (found: {found}); rsl_rl {generation} "
            f"takes the actor's observation groups from obs_groups[{obs_set!r}], e.g. "
            f"{{{obs_set!r}: ['policy']}}"
        )
    value = groups[obs_set]
    if isinstance(value, str):
        value = [value]
    if (
        not isinstance(value, (list, tuple))
        or not value
        or not all(isinstance(g, str) and g and "." not in g for g in value)
        or len(set(value)) != len(value)
    ):
        refuse_layout(
            f"agent config obs_groups[{obs_set!r}] = {value!r}: expected a non-empty list of distinct "
            "observation group names (without '.')"
        )
    return tuple(value)


def _head(
    model: Mapping[str, Any], section: str, out_features: int, std: torch.Tensor | None, generation: str
) -> tuple[str, int, tuple[float, float]]:
    """How the mean is read from the MLP's output: (head, number of actions, beta range)."""
    head, beta_range = "identity", (-1.0, 1.0)
    distribution = config_entry(model, "distribution_cfg")
    if isinstance(distribution, Mapping):
        name = _short_class(distribution.get("class_name"), f"agent config {section}.distribution_cfg")
        known = ("GaussianDistribution", "HeteroscedasticGaussianDistribution", "BetaDistribution")
        if name not in known:
            refuse_layout(
                f"agent config {section}.distribution_cfg.class_name {distribution.get('class_name')!r} is "
                f"not a distribution tdaot takes the mean of; expected one of {', '.join(known)}"
            )
        if name == "HeteroscedasticGaussianDistribution":
            head = "mean_half"
        elif name == "BetaDistribution":
            head = "beta"
            bounds = distribution.get("action_range", (-1.0, 1.0))
            if not (
                isinstance(bounds, (list, tuple))
                and len(bounds) == 2
                and all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds)
            ):
                refuse_layout(
                    f"agent config {section}.distribution_cfg.action_range {bounds!r}: expected [low, high]"
                )
            beta_range = (float(bounds[0]), float(bounds[1]))
    elif distribution is not None:
        refuse_layout(f"agent config {section}.distribution_cfg is {distribution!r}, not a mapping")
    elif config_entry(model, "state_dependent_std"):  # 3.x ActorCritic, 4.x MLPModel
        head = "mean_half"
    if head == "identity":
        actions = out_features
    elif out_features % 2:
        refuse_layout(
            f"agent config {section} makes the MLP's output [2, actions] ({head}) but its last layer has "
            f"{out_features} outputs, an odd number"
        )
    else:
        actions = out_features // 2
    if std is not None and tuple(std.shape) != (actions,):
        refuse_layout(
            f"the checkpoint's action std is {list(std.shape)} but the actor has {actions} actions "
            f"(rsl_rl {generation}, last layer {out_features} outputs, {head})"
        )
    return head, actions, beta_range


def _check_normalization_flag(model, section, key, normalizer, prefix) -> None:
    flag = config_entry(model, key)
    if flag is not None and bool(flag) != (normalizer is not None):
        has = "has" if normalizer is not None else "has no"
        refuse_layout(f"agent config {section}.{key} is {flag!r} but the checkpoint {has} {prefix}* entries")


def _finish(state: dict[str, torch.Tensor], where: str, ignored: tuple[str, ...], expected: str) -> None:
    left = [k for k in state if not k.startswith(ignored)]
    if left:
        refuse_layout(
            f"{where}: keys tdaot does not know for this layout: {key_list(left)}; expected {expected}"
        )


def _read_new(actor_state: Any, config: Mapping[str, Any]) -> ActorLayout:
    generation = "4.x-5.x"
    state = _state_dict(actor_state, "actor_state_dict")
    model, name = _model_config(config, "actor", ("MLPModel", "RNNModel"), generation)
    where = "actor_state_dict"
    normalizer = read_normalizer(take_prefixed(state, "obs_normalizer."), "obs_normalizer.", where)
    recurrent = read_recurrent(take_prefixed(state, "rnn.rnn."), "rnn.rnn.", where)
    layers = read_mlp(take_prefixed(state, "mlp."), "mlp.", where)
    std = None
    for key in ("distribution.std_param", "distribution.log_std_param", "std", "log_std"):
        if key in state:
            std = state.pop(key)
    _finish(
        state,
        where,
        (),
        "mlp.N.*, obs_normalizer.*, rnn.rnn.* and the std (distribution.std_param or "
        "distribution.log_std_param in 5.x, std or log_std in 4.x)",
    )
    if (name == "RNNModel") != (recurrent is not None):
        refuse_layout(
            f"agent config actor.class_name is {model['class_name']!r} but actor_state_dict "
            f"{'has' if recurrent is not None else 'has no'} rnn.rnn.* entries"
        )
    if recurrent is not None:
        check_rnn_config(recurrent, model, "actor")
    _check_normalization_flag(model, "actor", "obs_normalization", normalizer, "obs_normalizer.")
    return _layout(generation, name, config, "actor", model, normalizer, recurrent, layers, std)


def _read_old(checkpoint: Mapping[str, Any], config: Mapping[str, Any]) -> ActorLayout:
    generation = "2.x-3.x"
    state = _state_dict(checkpoint["model_state_dict"], "model_state_dict")
    model, name = _model_config(config, "policy", ("ActorCritic", "ActorCriticRecurrent"), generation)
    where = "model_state_dict"
    normalizer = read_normalizer(
        take_prefixed(state, "actor_obs_normalizer."), "actor_obs_normalizer.", where
    )
    if "obs_norm_state_dict" in checkpoint:  # 2.x: the runner's normalizer, saved beside the model
        if normalizer is not None:
            refuse_layout(
                "the checkpoint has both obs_norm_state_dict (2.x) and actor_obs_normalizer.* (3.x)"
            )
        beside = _state_dict(checkpoint["obs_norm_state_dict"], "obs_norm_state_dict")
        normalizer = read_normalizer(beside, "obs_norm_state_dict.", "obs_norm_state_dict")
    recurrent = read_recurrent(take_prefixed(state, "memory_a.rnn."), "memory_a.rnn.", where)
    layers = read_mlp(take_prefixed(state, "actor."), "actor.", where)
    std = state.pop("std", None)
    if std is None:
        std = state.pop("log_std", None)
    _finish(
        state,
        where,
        ("critic.", "critic_obs_normalizer.", "memory_c."),
        "actor.N.*, std or log_std, actor_obs_normalizer.*, memory_a.rnn.* (and the critic's critic.*, "
        "critic_obs_normalizer.*, memory_c.*)",
    )
    if (name == "ActorCriticRecurrent") != (recurrent is not None):
        refuse_layout(
            f"agent config policy.class_name is {model['class_name']!r} but model_state_dict "
            f"{'has' if recurrent is not None else 'has no'} memory_a.rnn.* entries"
        )
    if recurrent is not None:
        check_rnn_config(recurrent, model, "policy")
    if "obs_norm_state_dict" in checkpoint:
        flag = config_entry(config, "empirical_normalization")
        if flag is not None and not flag:
            refuse_layout(
                "agent config empirical_normalization is false but the checkpoint has obs_norm_state_dict"
            )
    else:
        _check_normalization_flag(
            model, "policy", "actor_obs_normalization", normalizer, "actor_obs_normalizer."
        )
        # 3.x reads the deprecated runner-level flag only where the policy's own is None: a
        # policy flag dumped as {} (MISSING) reached rsl_rl as {} and turned normalization off.
        unset = model.get("actor_obs_normalization") is None
        if unset and config_entry(config, "empirical_normalization") and normalizer is None:
            refuse_layout(
                "agent config empirical_normalization is true but the checkpoint has neither "
                "obs_norm_state_dict (2.x) nor actor_obs_normalizer.* (3.x)"
            )
    return _layout(generation, name, config, "policy", model, normalizer, recurrent, layers, std)


def _layout(generation, name, config, section, model, normalizer, recurrent, layers, std) -> ActorLayout:
    obs_set = "actor" if generation == "4.x-5.x" else "policy"
    groups = _obs_groups(config, obs_set, generation)
    first_in = layers[0][0].shape[1]
    obs_dim = recurrent.input_size if recurrent is not None else first_in
    if recurrent is not None and first_in != recurrent.hidden_size:
        refuse_layout(
            f"the actor's MLP takes {first_in} features but its recurrent layer gives {recurrent.hidden_size}"
        )
    if normalizer is not None and normalizer.mean.shape[1] != obs_dim:
        refuse_layout(
            f"the observation normalizer has {normalizer.mean.shape[1]} entries but the actor takes "
            f"{obs_dim} observations"
        )
    head, actions, beta_range = _head(model, section, layers[-1][0].shape[0], std, generation)
    clip = config_entry(config, "clip_actions")
    if clip is not None and (isinstance(clip, bool) or not isinstance(clip, (int, float)) or not clip > 0):
        refuse_layout(
            f"agent config clip_actions {clip!r}: expected a number > 0 (the environment wrapper clamps "
            "actions to [-clip_actions, clip_actions]) or null"
        )
    return ActorLayout(
        generation=generation,
        model_class=name,
        obs_groups=groups,
        obs_dim=obs_dim,
        num_actions=actions,
        activation=_activation(model, section),
        layers=layers,
        normalizer=normalizer,
        recurrent=recurrent,
        head=head,
        beta_range=beta_range,
        clip_actions=None if clip is None else float(clip),
    )


def group_dims(layout: ActorLayout, obs_dims: Mapping[str, int] | None) -> dict[str, int]:
    """Features per observation group: all of them for one group; given by ``obs_dims`` for
    several (the checkpoint holds only their sum)."""
    groups = layout.obs_groups
    if not obs_dims:
        if len(groups) > 1:
            refuse_layout(
                f"the actor reads observation groups {', '.join(groups)} ({layout.obs_dim} features in all) "
                "and the checkpoint holds only their sum: give obs_dims={group: features, ...}"
            )
        return {groups[0]: layout.obs_dim}
    if set(obs_dims) != set(groups) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in obs_dims.values()
    ):
        refuse_layout(
            f"obs_dims {dict(obs_dims)!r} must give a feature count > 0 for exactly the actor's groups: "
            f"{', '.join(groups)}"
        )
    if sum(obs_dims.values()) != layout.obs_dim:
        refuse_layout(
            f"obs_dims {dict(obs_dims)!r} sum to {sum(obs_dims.values())} but the actor takes "
            f"{layout.obs_dim} observations"
        )
    return {g: obs_dims[g] for g in groups}
