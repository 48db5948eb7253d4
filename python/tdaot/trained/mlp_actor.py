"""The deterministic actor of an MLP policy as skrl, rl_games and Stable-Baselines3 compute it,
rebuilt from tensors a reader took out of their files (:class:`ActorSpec`).

One observation tensor in (``observation``), one action out (``action``), in this order:

1. ``obs_clip``: the environment wrapper's clamp of the observation (Isaac Lab's rl_games
   wrapper clamps to ``clip_observations``);
2. the observation normalizer: ``clamp((x - mean) / denominator, -clip, clip)``, the
   denominator computed at read time exactly as the library computes it each step;
3. the MLP: Linear layers and the activation modules between them, as the library built them,
   with ``rnn`` (a torch LSTM or GRU, one step per call) after its first ``rnn_at`` modules
   (0: on the normalised observation, sb3-contrib's RecurrentPPO and rl_games' ``before_mlp``),
   then ``rnn_norm`` (rl_games' ``layer_norm``); its state carried as tdaot's recurrent policies
   carry it (torchrl's convention): ``recurrent_state_h`` / ``recurrent_state_c`` (LSTM) or
   ``recurrent_state`` (GRU), [num_layers, hidden] per row, in and out as ``("next", key)``,
   zeroed where ``is_init`` is true (the libraries zero a row's state at its episode's start);
4. ``squash``: ``tanh`` of the output where the library's model applies it;
5. ``unit_rescale``: ``clamp(a, -1, 1)`` then ``a * (high - low) / 2 + (high + low) / 2``
   (rl_games' player), or the squashed form ``low + 0.5 (a + 1)(high - low)`` (SB3's
   ``unscale_action``), given as (scale, offset, clamp first);
6. ``action_clip``: a clamp to ``[low, high]`` (SB3's ``predict``, Isaac Lab's ``clip_actions``).

It reads nothing itself: the readers decide which of these a checkpoint has.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn

OBSERVATION_KEY = "observation"
ACTION_KEY = "action"
IS_INIT_KEY = "is_init"
STATE_KEYS = {"lstm": ("recurrent_state_h", "recurrent_state_c"), "gru": ("recurrent_state",)}


@dataclass(frozen=True)
class ObservationNormalizer:
    """``clamp((x - mean) / denominator, -clip, clip)``; mean and denominator [n]."""

    mean: torch.Tensor
    denominator: torch.Tensor
    clip: float | None


@dataclass(frozen=True)
class ActorSpec:
    """Everything :class:`MlpActor` computes, as a reader found it."""

    library: str  # "skrl", "rl_games", "sb3"
    source: str  # the file the weights came from
    chosen: str = ""  # why that file (a run directory's rule), said beside it
    modules: list[nn.Module] = field(default_factory=list)  # the MLP: Linear layers and activations
    obs_dim: int = 0
    num_actions: int = 0
    normalizer: ObservationNormalizer | None = None
    obs_clip: float | None = None
    squash: bool = False
    rescale: tuple[torch.Tensor, torch.Tensor, bool] | None = None  # (scale, offset, clamp ±1 first)
    action_clip: tuple[torch.Tensor, torch.Tensor] | None = None  # (low, high)
    notes: tuple[str, ...] = field(default_factory=tuple)  # what extra_repr says beside the layout
    vecnormalize: str | None = None  # the VecNormalize file of an SB3 normalizer
    rnn: nn.LSTM | nn.GRU | None = None  # a recurrent step inside the MLP
    rnn_at: int = 0  # how many of ``modules`` run before it
    rnn_norm: nn.LayerNorm | None = None  # applied to its output


class MlpActor(TensorDictModuleBase):
    """The deterministic action of a trained MLP policy.

    in_keys  ``observation`` [batch, obs_dim]
    out_keys ``action`` [batch, num_actions]
    """

    # The VecNormalize file an SB3 policy's normalizer came from (tdaot.trained.sb3), else None.
    vecnormalize: str | None = None

    def __init__(self, spec: ActorSpec) -> None:
        super().__init__()
        self.library, self.source, self.chosen = spec.library, spec.source, spec.chosen
        self.obs_dim, self.num_actions = spec.obs_dim, spec.num_actions
        self.obs_clip = spec.obs_clip
        self.squash = spec.squash
        self.notes = spec.notes
        self.vecnormalize = spec.vecnormalize
        self.pre = nn.Sequential(*spec.modules[: spec.rnn_at])
        self.mlp = nn.Sequential(*spec.modules[spec.rnn_at :])
        self.normalize = spec.normalizer is not None
        if spec.normalizer is not None:
            self.register_buffer("obs_mean", spec.normalizer.mean.detach().clone())
            self.register_buffer("obs_denominator", spec.normalizer.denominator.detach().clone())
            self.norm_clip = spec.normalizer.clip
        self.rescale = spec.rescale is not None
        if spec.rescale is not None:
            scale, offset, self.rescale_clamp = spec.rescale
            self.register_buffer("action_scale", scale.detach().clone())
            self.register_buffer("action_offset", offset.detach().clone())
        self.clip = spec.action_clip is not None
        if spec.action_clip is not None:
            self.register_buffer("action_low", spec.action_clip[0].detach().clone())
            self.register_buffer("action_high", spec.action_clip[1].detach().clone())
        self.rnn, self.rnn_norm = spec.rnn, spec.rnn_norm
        self.state_keys: tuple[str, ...] = ()
        if spec.rnn is not None:
            self.state_keys = STATE_KEYS["lstm" if isinstance(spec.rnn, nn.LSTM) else "gru"]
        self.in_keys = [OBSERVATION_KEY, *self.state_keys, *([IS_INIT_KEY] if self.state_keys else [])]
        self.out_keys = [ACTION_KEY, *(("next", key) for key in self.state_keys)]
        self.eval()

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        x = tensordict.get(OBSERVATION_KEY)
        if self.obs_clip is not None:
            x = x.clamp(-self.obs_clip, self.obs_clip)
        if self.normalize:
            x = (x - self.obs_mean) / self.obs_denominator
            if self.norm_clip is not None:
                x = x.clamp(-self.norm_clip, self.norm_clip)
        x = self.pre(x)
        if self.rnn is not None:
            # [batch, layers, hidden] as carried, [layers, batch, hidden] as torch's RNNs take it.
            reset = tensordict.get(IS_INIT_KEY).reshape(-1, 1, 1)
            states = [tensordict.get(key) for key in self.state_keys]
            states = [torch.where(reset, torch.zeros_like(s), s).transpose(0, 1).contiguous() for s in states]
            out, hidden = self.rnn(x.unsqueeze(0), states[0] if len(states) == 1 else tuple(states))
            x = out.squeeze(0)
            if self.rnn_norm is not None:
                x = self.rnn_norm(x)
            carried = (hidden,) if isinstance(hidden, torch.Tensor) else hidden
            for key, state in zip(self.state_keys, carried):
                tensordict.set(("next", key), state.transpose(0, 1))
        action = self.mlp(x)
        if self.squash:
            action = torch.tanh(action)
        if self.rescale:
            if self.rescale_clamp:
                action = action.clamp(-1.0, 1.0)
            action = action * self.action_scale + self.action_offset
        if self.clip:
            action = torch.clamp(action, self.action_low, self.action_high)
        tensordict.set(ACTION_KEY, action)
        return tensordict

    def example(self, batch: int = 1) -> TensorDict:
        """Zero observations of ``batch`` rows and, for a recurrent actor, zero state with
        ``is_init`` true (the first step of an episode)."""
        dtype = next(self.mlp.parameters()).dtype
        values = {OBSERVATION_KEY: torch.zeros(batch, self.obs_dim, dtype=dtype)}
        if self.rnn is not None:
            shape = (batch, self.rnn.num_layers, self.rnn.hidden_size)
            values.update({key: torch.zeros(shape, dtype=dtype) for key in self.state_keys})
            values[IS_INIT_KEY] = torch.ones(batch, 1, dtype=torch.bool)
        return TensorDict(values, batch_size=[batch])

    def extra_repr(self) -> str:
        parts = [
            f"{self.library} actor from {self.source}" + (f" ({self.chosen})" if self.chosen else ""),
            f"{self.obs_dim} observations -> {self.num_actions} actions",
            f"normalizer {'on' if self.normalize else 'off'}",
            *self.notes,
        ]
        return ", ".join(parts)
