"""``tdaot.from_sb3``: a Stable-Baselines3 2.x model (PPO, A2C, sb3-contrib's RecurrentPPO) as a
tensordict policy tdaot builds.

``model.save`` writes a zip: ``data`` (JSON; what JSON cannot hold is cloudpickled, base64, under
``:serialized:``), ``policy.pth`` (the policy's state dict) and more. The actor of an
``ActorCriticPolicy``: ``mlp_extractor.policy_net.{0,2,..}.*`` (an activation after every
Linear: ``policy_kwargs.activation_fn``, Tanh by default), then ``action_net.*`` (the Gaussian's
mean); ``log_std`` is the std, unused. ``predict(obs, deterministic=True)`` returns that mean,
clipped to the action space's ``[low, high]``, or, with ``squash_output`` (gSDE), squashed by
tanh and rescaled ``low + 0.5 (a + 1)(high - low)``.

VecNormalize's statistics live beside the model, pickled (``VecNormalize.save``): Isaac Lab
writes ``model_vecnormalize.pkl``, the RL Zoo ``vecnormalize.pkl``. Its observation
normalization is ``clip((obs - mean) / sqrt(var + epsilon), -clip_obs, clip_obs)``.

Every pickle (the spaces, policy_kwargs, VecNormalize) is read as data by
:mod:`tdaot.trained.safe_pickle`: nothing in it runs. RecurrentPPO's ``lstm_actor`` runs before
the actor's MLP, its state carried as ``recurrent_state_h`` / ``recurrent_state_c`` and zeroed at
an episode's start (``is_init``), as ``predict(..., episode_start=...)`` does. SAC/TD3 actors,
image, dict and discrete spaces are refused by name.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import io
import json
import os
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from torch import nn

from tdaot.trained.mlp_actor import ActorSpec, MlpActor, ObservationNormalizer
from tdaot.trained.safe_pickle import global_name, load_data, state_of
from tdaot.trained.trainer_files import (
    check_unknown,
    key_names,
    linear_chain,
    linear_pair,
    refuse,
    rnn_layer,
    state_dict,
    take,
)

LIBRARY = "sb3"
POLICIES = ("stable_baselines3.common.policies.ActorCriticPolicy",)  # PPO's and A2C's
RECURRENT_POLICY = "sb3_contrib.common.recurrent.policies.RecurrentActorCriticPolicy"
BOX = "gymnasium.spaces.box.Box"
VEC_NORMALIZE = "stable_baselines3.common.vec_env.vec_normalize.VecNormalize"
RUNNING_MEAN_STD = "stable_baselines3.common.running_mean_std.RunningMeanStd"
# torch.nn activation classes by the name pickled for policy_kwargs.activation_fn.
ACTIVATIONS = {
    f"torch.nn.modules.activation.{name}": getattr(nn, name)
    for name in ("Tanh", "ReLU", "ELU", "LeakyReLU", "SELU", "GELU", "SiLU", "Sigmoid", "Softplus", "Mish")
}
_STEPS = re.compile(r"(.*)_(\d+)_steps\.zip")


def find_model(source: Path) -> tuple[Path, str]:
    """(model zip, how it was chosen) for a run directory or a zip."""
    if source.is_file():
        return source, "the file given"
    if not source.is_dir():
        refuse(f"'{source}' is neither a Stable-Baselines3 model zip nor a directory holding one")
    if (source / "model.zip").is_file():
        return source / "model.zip", "model.zip (the final save)"
    steps = {}
    for entry in source.glob("*_steps.zip"):
        match = _STEPS.fullmatch(entry.name)
        if match:
            steps[int(match.group(2))] = entry
    if steps:
        return steps[max(steps)], f"the most steps of {len(steps)} CheckpointCallback saves"
    found = sorted(p.name for p in source.glob("*.zip"))
    refuse(
        f"directory '{source}' has no model.zip (Isaac Lab's and model.save('model')'s name) nor "
        f"<prefix>_<steps>_steps.zip (CheckpointCallback's); zips there: {key_names(found)}; name one instead"
    )


def find_vecnormalize(model: Path) -> Path | None:
    """The VecNormalize pickle saved beside ``model``: Isaac Lab's ``model_vecnormalize.pkl`` (or
    ``model_vecnormalize_<N>_steps.pkl`` for ``model_<N>_steps.zip``), else ``vecnormalize.pkl``."""
    names = []
    match = _STEPS.fullmatch(model.name)
    if match:
        names.append(f"{match.group(1)}_vecnormalize_{match.group(2)}_steps.pkl")
    names += [f"{model.stem}_vecnormalize.pkl", "model_vecnormalize.pkl", "vecnormalize.pkl"]
    for name in names:
        if (model.parent / name).is_file():
            return model.parent / name
    return None


def _zip_member(archive: zipfile.ZipFile, name: str, where: Path) -> bytes:
    try:
        return archive.read(name)
    except KeyError:
        refuse(
            f"'{where}' has no {name!r} (a Stable-Baselines3 save holds data and policy.pth; found "
            f"{key_names(archive.namelist())})"
        )


def _unpickled(data: Mapping[str, Any], key: str, where: str) -> Any:
    """A ``data`` entry: the plain JSON value, or its ``:serialized:`` cloudpickle read as data."""
    value = data.get(key)
    if isinstance(value, Mapping) and ":serialized:" in value:
        try:
            raw = base64.b64decode(value[":serialized:"], validate=True)
        except (binascii.Error, TypeError, ValueError):
            refuse(f"{where} data[{key!r}][':serialized:'] is not base64")
        return load_data(raw, f"{where} data[{key!r}]")
    return value


def read_model(path: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The zip's ``data`` (JSON) and ``policy.pth`` (tensors only)."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as err:
        refuse(f"'{path}' is not a Stable-Baselines3 model zip: {err}")
    with archive:
        try:
            data = json.loads(_zip_member(archive, "data", path))
        except ValueError as err:
            refuse(f"'{path}' data is not JSON: {err}")
        raw = _zip_member(archive, "policy.pth", path)
    try:
        # weights_only: a state dict is tensors in a dict; nothing in the file is executed.
        weights = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - every unreadable file is reported the same way
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        refuse(
            f"cannot read '{path}' policy.pth as tensors only (torch.load weights_only=True): "
            f"{type(err).__name__}: {first}"
        )
    if not isinstance(data, dict):
        refuse(f"'{path}' data is a {type(data).__name__}, not the saved attributes' mapping")
    return data, state_dict(weights, f"'{path}' policy.pth")


def _box(value: Any, key: str, where: str) -> tuple[np.ndarray, np.ndarray]:
    state = state_of(value, BOX, f"{where} data[{key!r}]")
    low, high = state.get("low"), state.get("high")
    if (
        not isinstance(low, np.ndarray)
        or not isinstance(high, np.ndarray)
        or low.ndim != 1
        or low.shape != high.shape
    ):
        refuse(
            f"{where} data[{key!r}]: a Box whose low/high are not 1-D arrays of one shape ({low!r}, {high!r})"
        )
    return low, high


def _activation(policy_kwargs: Any, where: str) -> type[nn.Module]:
    if not isinstance(policy_kwargs, Mapping):
        refuse(f"{where} data['policy_kwargs'] is {policy_kwargs!r}, not a mapping")
    for key in ("features_extractor_class", "net_arch_class"):
        if key in policy_kwargs and global_name(policy_kwargs[key]) not in (
            None,
            "stable_baselines3.common.torch_layers.FlattenExtractor",
        ):
            refuse(
                f"{where} policy_kwargs.{key} is {global_name(policy_kwargs[key])}; tdaot rebuilds "
                f"FlattenExtractor MLPs"
            )
    activation = policy_kwargs.get("activation_fn")
    if activation is None:
        return nn.Tanh  # ActorCriticPolicy's default
    name = global_name(activation)
    if name not in ACTIVATIONS:
        refuse(
            f"{where} policy_kwargs.activation_fn is {name or activation!r}; tdaot rebuilds "
            f"{', '.join(ACTIVATIONS)}"
        )
    return ACTIVATIONS[name]


def read_policy(data: Mapping[str, Any], weights: dict[str, torch.Tensor], source: str) -> ActorSpec:
    """The deterministic actor of an SB3 save (its ``data`` and ``policy.pth``)."""
    where = f"'{source}'"
    policy_class = global_name(_unpickled(data, "policy_class", where))
    recurrent = policy_class == RECURRENT_POLICY
    if policy_class not in (*POLICIES, RECURRENT_POLICY):
        refuse(
            f"{where} data['policy_class'] is {policy_class or data.get('policy_class')!r}; tdaot rebuilds "
            f"{', '.join((*POLICIES, RECURRENT_POLICY))} (PPO's and A2C's MlpPolicy, RecurrentPPO's "
            f"MlpLstmPolicy)"
        )
    observation = _unpickled(data, "observation_space", where)
    if global_name(observation) != BOX:
        refuse(
            f"{where} data['observation_space'] is a {global_name(observation) or observation!r}; tdaot "
            f"rebuilds Box observations"
        )
    obs_low, _ = _box(observation, "observation_space", where)
    action_low, action_high = _box(_unpickled(data, "action_space", where), "action_space", where)
    kwargs = _unpickled(data, "policy_kwargs", where) or {}
    activation = _activation(kwargs, where)
    squash = bool(kwargs.get("squash_output", False))
    use_sde = bool(data.get("use_sde", False))
    state = dict(weights)
    location = f"{where} policy.pth"
    lstm = None
    if recurrent:  # sb3-contrib's RecurrentPPO: lstm_actor before the actor's MLP
        lstm = rnn_layer(take(state, "lstm_actor."), "lstm_actor.", location)
        take(state, "lstm_critic.")
        take(state, "critic.")
    layers = (
        linear_chain(take(state, "mlp_extractor.policy_net."), "mlp_extractor.policy_net.", location)
        if any(k.startswith("mlp_extractor.policy_net.") for k in state)
        else []
    )
    mean = linear_pair(state, "action_net.", location)
    state.pop("action_net.weight"), state.pop("action_net.bias")
    for prefix in ("mlp_extractor.value_net.", "value_net."):
        take(state, prefix)
    for key in ("log_std", "std"):
        state.pop(key, None)
    check_unknown(
        state,
        location,
        "mlp_extractor.policy_net.N.*, mlp_extractor.value_net.N.*, action_net.*, value_net.*, log_std "
        "(an ActorCriticPolicy with a FlattenExtractor; RecurrentPPO's lstm_actor.*, lstm_critic.*, "
        "critic.*)",
    )
    modules: list[nn.Module] = []
    for weight, bias in layers:
        linear = nn.Linear(weight.shape[1], weight.shape[0], dtype=weight.dtype)
        linear.load_state_dict({"weight": weight, "bias": bias})
        modules += [linear, activation()]
    head = nn.Linear(mean[0].shape[1], mean[0].shape[0], dtype=mean[0].dtype)
    head.load_state_dict({"weight": mean[0], "bias": mean[1]})
    modules.append(head)
    mlp_in = layers[0][0].shape[1] if layers else mean[0].shape[1]
    obs_dim = mlp_in
    if lstm is not None:
        if mlp_in != lstm.hidden_size:
            refuse(
                f"{location}: the actor's MLP takes {mlp_in} features but lstm_actor gives {lstm.hidden_size}"
            )
        obs_dim = lstm.input_size
    if obs_dim != obs_low.shape[0]:
        refuse(
            f"{location}: the actor takes {obs_dim} observations but data['observation_space'] has "
            f"{obs_low.shape[0]}"
        )
    actions = mean[0].shape[0]
    if action_low.shape[0] != actions:
        refuse(
            f"{location}: action_net gives {actions} actions but data['action_space'] has "
            f"{action_low.shape[0]}"
        )
    low = torch.from_numpy(action_low.astype(np.float32))
    high = torch.from_numpy(action_high.astype(np.float32))
    spec = ActorSpec(
        library=LIBRARY, source=source, modules=modules, obs_dim=obs_dim, num_actions=actions, rnn=lstm,
        notes=("RecurrentPPO LSTM",) if lstm is not None else (),
    )  # fmt: skip
    if squash:
        if not bool(torch.isfinite(low).all() and torch.isfinite(high).all()):
            refuse(f"{where} squash_output rescales to data['action_space'], whose bounds are not finite")
        # unscale_action: low + 0.5 * (a + 1) * (high - low); the gSDE distribution's mode is tanh'd.
        return dataclasses.replace(
            spec, squash=use_sde, rescale=((high - low) / 2.0, low + (high - low) / 2.0, False),
            notes=(*spec.notes, "squashed output rescaled to the action space"),
        )  # fmt: skip
    if bool(torch.isinf(low).all() and torch.isinf(high).all()):
        return spec
    return dataclasses.replace(
        spec, action_clip=(low, high), notes=(*spec.notes, "action clipped to the action space")
    )


def read_vecnormalize(path: Path, obs_dim: int) -> ObservationNormalizer | None:
    """VecNormalize's observation normalization (None where ``norm_obs`` is false), read as data."""
    where = f"VecNormalize file '{path}'"
    try:
        raw = path.read_bytes()
    except OSError as err:
        refuse(f"cannot read {where}: {err.strerror or err}")
    state = state_of(load_data(raw, where), VEC_NORMALIZE, where)
    if not state.get("norm_obs", True):
        return None
    if state.get("norm_obs_keys"):
        refuse(
            f"{where} normalises dict observations (norm_obs_keys {state['norm_obs_keys']!r}); tdaot "
            f"rebuilds Box observations"
        )
    rms = state_of(state.get("obs_rms"), RUNNING_MEAN_STD, f"{where} obs_rms")
    mean, var = rms.get("mean"), rms.get("var")
    for name, value in (("mean", mean), ("var", var)):
        if not isinstance(value, np.ndarray) or value.shape != (obs_dim,):
            shape = list(value.shape) if isinstance(value, np.ndarray) else repr(value)
            refuse(f"{where} obs_rms.{name} is {shape}, expected [{obs_dim}] (one entry per observation)")
    epsilon, clip = state.get("epsilon"), state.get("clip_obs")
    for name, value in (("epsilon", epsilon), ("clip_obs", clip)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            refuse(f"{where} {name} is {value!r}, expected a number")
    # VecNormalize._normalize_obs, in float64 there: clip((obs - mean) / sqrt(var + epsilon), ±clip_obs).
    denominator = np.sqrt(var.astype(np.float64) + float(epsilon))
    return ObservationNormalizer(
        torch.from_numpy(mean.astype(np.float32)),
        torch.from_numpy(denominator.astype(np.float32)),
        float(clip),
    )


def from_sb3(
    source: str | os.PathLike, *, vecnormalize: str | os.PathLike | bool | None = None
) -> tuple[MlpActor, TensorDict]:
    """The deterministic actor of a Stable-Baselines3 model and an example TensorDict of batch 1.

    ``source``: the model zip, or a directory holding ``model.zip`` (else the newest
    ``*_<steps>_steps.zip``). ``vecnormalize``: the VecNormalize pickle; None finds it beside the
    model (:func:`find_vecnormalize`), False builds without one. The policy's ``source`` and
    ``vecnormalize`` attributes name the files taken.
    """
    model, how = find_model(Path(source))
    data, weights = read_model(model)
    spec = read_policy(data, weights, str(model))
    found = None
    if vecnormalize is None:
        found = find_vecnormalize(model)
    elif vecnormalize is not False:
        if vecnormalize is True or not Path(vecnormalize).is_file():
            refuse(
                f"vecnormalize={vecnormalize!r}: expected the path of a VecNormalize pickle (or False: none)"
            )
        found = Path(vecnormalize)
    notes = spec.notes
    if found is not None:
        normalizer = read_vecnormalize(found, spec.obs_dim)
        notes = (f"VecNormalize {found}" + ("" if normalizer else " (norm_obs false)"), *notes)
        spec = dataclasses.replace(spec, normalizer=normalizer)
    vecnormalize_file = str(found) if found is not None else None
    policy = MlpActor(dataclasses.replace(spec, chosen=how, notes=notes, vecnormalize=vecnormalize_file))
    return policy, policy.example(1)
