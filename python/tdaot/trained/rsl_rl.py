"""``tdaot.from_rsl_rl``: an rsl_rl run (or checkpoint) as a tensordict policy tdaot builds.

rsl_rl's actor concatenates the observation groups its config names, normalises them, runs the
MLP (after a GRU or LSTM for recurrent models) and, at inference, returns the mean of its action
distribution, which Isaac Lab's and mjlab's environment wrappers clamp to the runner config's
``clip_actions`` (when set) before the environment sees it: the policy here clamps it too.
:class:`RslRlPolicy` is that computation rebuilt from the checkpoint's tensors, as
a ``TensorDictModuleBase`` (rsl_rl itself uses ``tensordict.TensorDict`` but not tensordict.nn).
A recurrent actor carries its state as tdaot's recurrent policies do (torchrl's convention):
``recurrent_state`` (GRU) or ``recurrent_state_h`` / ``recurrent_state_c`` (LSTM), each
[num_layers, hidden] per row, in and out as ``("next", key)``, zeroed where ``is_init`` is true:
rsl_rl zeroes a row's state after its episode ends, so the row's next step starts from zero.

rsl_rl is not imported: the checkpoint is read with ``torch.load(weights_only=True)`` (no code
of the file runs) and the layout by :mod:`tdaot.trained.rsl_rl_layout`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn

from tdaot.errors import InvalidArgumentError
from tdaot.trained.isaac_yaml import load_isaac_yaml
from tdaot.trained.rsl_rl_layout import ActorLayout, group_dims, read_actor

_CHECKPOINT = re.compile(r"model_(\d+)\.pt")
ACTION_KEY = "action"
IS_INIT_KEY = "is_init"
STATE_KEYS = {"gru": ("recurrent_state",), "lstm": ("recurrent_state_h", "recurrent_state_c")}


def _activation_module(name: str) -> nn.Module:
    # The modules rsl_rl.utils.resolve_nn_activation builds for each name (rsl_rl_layout.ACTIVATIONS).
    return {
        "elu": nn.ELU,
        "selu": nn.SELU,
        "relu": nn.ReLU,
        "crelu": nn.CELU,
        "lrelu": nn.LeakyReLU,
        "tanh": nn.Tanh,
        "sigmoid": nn.Sigmoid,
        "softplus": nn.Softplus,
        "gelu": nn.GELU,
        "swish": nn.SiLU,
        "mish": nn.Mish,
        "identity": nn.Identity,
    }[name]()


class RslRlPolicy(TensorDictModuleBase):
    """The deterministic actor of an rsl_rl checkpoint.

    in_keys  the actor's observation groups (config order), then for a recurrent actor its
             state keys and ``is_init``
    out_keys ``action``, then ``("next", state key)`` for each state key
    """

    def __init__(self, layout: ActorLayout, obs_dims: Mapping[str, int]) -> None:
        super().__init__()
        self.layout_generation = layout.generation
        self.model_class = layout.model_class
        self.obs_groups = tuple(layout.obs_groups)
        self.obs_dims = dict(obs_dims)
        self.num_actions = layout.num_actions
        self.head = layout.head
        self.beta_scale = layout.beta_range[1] - layout.beta_range[0]
        self.beta_offset = layout.beta_range[0]
        self.normalize = layout.normalizer is not None
        self.clip_actions = layout.clip_actions
        if layout.normalizer is not None:
            self.register_buffer("obs_mean", layout.normalizer.mean.detach().clone())
            self.register_buffer("obs_std", layout.normalizer.std.detach().clone())
            self.obs_eps = layout.normalizer.eps
        self.rnn: nn.Module | None = None
        self.state_keys: tuple[str, ...] = ()
        if layout.recurrent is not None:
            spec = layout.recurrent
            cls = nn.GRU if spec.kind == "gru" else nn.LSTM
            dtype = spec.parameters["weight_ih_l0"].dtype  # load_state_dict would cast silently
            self.rnn = cls(spec.input_size, spec.hidden_size, spec.num_layers, dtype=dtype)
            self.rnn.load_state_dict(spec.parameters)
            self.state_keys = STATE_KEYS[spec.kind]
            self.hidden_size, self.num_layers = spec.hidden_size, spec.num_layers
        modules: list[nn.Module] = []
        for index, (weight, bias) in enumerate(layout.layers):
            if index:
                modules.append(_activation_module(layout.activation))
            linear = nn.Linear(weight.shape[1], weight.shape[0], dtype=weight.dtype)
            linear.load_state_dict({"weight": weight, "bias": bias})
            modules.append(linear)
        self.mlp = nn.Sequential(*modules)
        self.in_keys = [*self.obs_groups, *self.state_keys, *([IS_INIT_KEY] if self.state_keys else [])]
        self.out_keys = [ACTION_KEY, *(("next", key) for key in self.state_keys)]
        self.eval()

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        x = torch.cat([tensordict.get(group) for group in self.obs_groups], dim=-1)
        if self.normalize:
            x = (x - self.obs_mean) / (self.obs_std + self.obs_eps)
        if self.rnn is not None:
            # [batch, layers, hidden] as carried, [layers, batch, hidden] as torch's RNNs take it.
            reset = tensordict.get(IS_INIT_KEY).reshape(-1, 1, 1)
            states = [tensordict.get(key) for key in self.state_keys]
            states = [torch.where(reset, torch.zeros_like(s), s).transpose(0, 1).contiguous() for s in states]
            hidden = states[0] if len(states) == 1 else tuple(states)
            out, hidden = self.rnn(x.unsqueeze(0), hidden)
            x = out.squeeze(0)
            carried = (hidden,) if isinstance(hidden, torch.Tensor) else hidden
            for key, state in zip(self.state_keys, carried):
                tensordict.set(("next", key), state.transpose(0, 1))
        out = self.mlp(x)
        action = self._mean(out)
        if self.clip_actions is not None:  # the env wrapper's clamp, as the policy was trained
            action = action.clamp(-self.clip_actions, self.clip_actions)
        tensordict.set(ACTION_KEY, action)
        return tensordict

    def _mean(self, out: torch.Tensor) -> torch.Tensor:
        actions = self.num_actions
        if self.head == "identity":
            return out
        if self.head == "mean_half":  # rsl_rl's [..., 2, actions] output, [..., 0, :] its mean
            return out[..., :actions]
        # BetaDistribution.deterministic_output: the Beta's mean, rescaled to the action range.
        alpha = nn.functional.softplus(out[..., :actions]) + 1.0
        beta = nn.functional.softplus(out[..., actions:]) + 1.0
        return alpha / (alpha + beta) * self.beta_scale + self.beta_offset

    def example(self, batch: int = 1) -> TensorDict:
        """Inputs of ``batch`` rows: zero observations and, for a recurrent actor, zero state with
        ``is_init`` true (the first step of an episode)."""
        dtype = self.mlp[0].weight.dtype
        values: dict[str, torch.Tensor] = {
            group: torch.zeros(batch, self.obs_dims[group], dtype=dtype) for group in self.obs_groups
        }
        for key in self.state_keys:
            values[key] = torch.zeros(batch, self.num_layers, self.hidden_size, dtype=dtype)
        if self.state_keys:
            values[IS_INIT_KEY] = torch.ones(batch, 1, dtype=torch.bool)
        return TensorDict(values, batch_size=[batch])

    def extra_repr(self) -> str:
        return (
            f"rsl_rl {self.layout_generation} {self.model_class}, groups {list(self.obs_groups)}, "
            f"normalizer {'on' if self.normalize else 'off'}, head {self.head}"
            + (f", actions clipped to +-{self.clip_actions:g}" if self.clip_actions is not None else "")
        )


def from_rsl_rl(
    source: str | os.PathLike,
    *,
    checkpoint: str | os.PathLike | int | None = None,
    agent: str | os.PathLike | Mapping[str, Any] | None = None,
    obs_dims: Mapping[str, int] | None = None,
) -> tuple[RslRlPolicy, TensorDict]:
    """The deterministic actor of an rsl_rl run and an example TensorDict of batch 1.

    ``source`` is a run directory as rsl_rl's runner leaves it (``model_<iter>.pt`` beside
    ``params/agent.yaml``; the newest iteration unless ``checkpoint`` names a file or an
    iteration) or one checkpoint file, whose config is ``agent`` (a path to agent.yaml, or
    the dict) or else ``params/agent.yaml`` beside it. ``obs_dims`` gives each observation
    group's feature count when the actor reads several groups (the checkpoint holds only
    their sum). Isaac Lab's yaml dumps are read as data (no Python tag is executed).
    """
    checkpoint_path, agent_source = _resolve(Path(source), checkpoint, agent)
    config = _load_config(agent_source)
    layout = read_actor(_load_checkpoint(checkpoint_path), config)
    policy = RslRlPolicy(layout, group_dims(layout, obs_dims))
    return policy, policy.example(1)


def _iteration_files(run: Path) -> dict[int, Path]:
    found = {}
    for entry in run.iterdir():
        match = _CHECKPOINT.fullmatch(entry.name)
        if match and entry.is_file():
            found[int(match.group(1))] = entry
    return found


def _resolve(source: Path, checkpoint, agent) -> tuple[Path, Path | Mapping[str, Any]]:
    if source.is_dir():
        files = _iteration_files(source)
        if checkpoint is None:
            if not files:
                raise InvalidArgumentError(
                    f"run directory '{source}' has no model_<iteration>.pt checkpoint (rsl_rl's runner "
                    "saves model_0.pt, model_50.pt, ... there)"
                )
            chosen = files[max(files)]
        elif isinstance(checkpoint, int) and not isinstance(checkpoint, bool):
            if checkpoint not in files:
                have = ", ".join(str(i) for i in sorted(files)) or "none"
                raise InvalidArgumentError(
                    f"run directory '{source}' has no model_{checkpoint}.pt (iterations saved: {have})"
                )
            chosen = files[checkpoint]
        else:
            given = Path(checkpoint)
            chosen = given if given.is_absolute() or given.exists() else source / given
            if not chosen.is_file():
                raise InvalidArgumentError(
                    f"checkpoint '{checkpoint}' is neither a file nor a file in run directory '{source}'"
                )
        if agent is None:
            agent = source / "params" / "agent.yaml"
            if not agent.is_file():
                raise InvalidArgumentError(
                    f"run directory '{source}' has no params/agent.yaml (the runner config rsl_rl's "
                    "training scripts dump there); give agent= (its path or the dict)"
                )
        return chosen, agent
    if source.is_file():
        if checkpoint is not None:
            raise InvalidArgumentError(
                f"checkpoint={checkpoint!r} chooses a file of a run directory, but source '{source}' is "
                "already a checkpoint file"
            )
        if agent is None:
            agent = source.parent / "params" / "agent.yaml"
            if not agent.is_file():
                raise InvalidArgumentError(
                    f"checkpoint '{source}' has no params/agent.yaml beside it; give agent= (the path of "
                    "the run's agent.yaml, or its dict)"
                )
        return source, agent
    raise InvalidArgumentError(f"'{source}' is neither an rsl_rl run directory nor a checkpoint file")


def _load_config(agent) -> Mapping[str, Any]:
    if isinstance(agent, Mapping):
        return agent
    if not isinstance(agent, (str, os.PathLike)):
        raise InvalidArgumentError(
            f"agent={type(agent).__name__}: expected the path of agent.yaml or the config as a dict"
        )
    config = load_isaac_yaml(agent)
    if not isinstance(config, Mapping):
        raise InvalidArgumentError(
            f"'{agent}' holds a {type(config).__name__}, not the runner config's mapping"
        )
    return config


def _load_checkpoint(path: Path) -> Any:
    try:
        # weights_only: a checkpoint is tensors in dicts; nothing in the file is executed.
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - every unreadable file is reported the same way
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise InvalidArgumentError(
            f"cannot read checkpoint '{path}' as tensors only (torch.load weights_only=True): "
            f"{type(err).__name__}: {first}"
        ) from None
