"""torchrl policies that tdaot builds: the families people train, kept tiny.

Each public factory returns ``(policy, example_tensordict)``, the form
``tdaot build examples/torchrl_policies.py:FACTORY -o OUT.pt2`` expects. tdaot itself
does not import torchrl; these examples and the tests do.

Heads that share one artifact (``stochastic_actors``, ``qvalue_actors``) nest their
keys under the head's name, so one package carries several families side by side.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule, TensorDictSequential
from torch import nn
from torch.distributions import Categorical, Normal
from torchrl.envs.transforms import ObservationNorm
from torchrl.modules import (
    MLP,
    ConvNet,
    GRUModule,
    LSTMModule,
    MultiAgentMLP,
    OneHotCategorical,
    ProbabilisticActor,
    QValueActor,
    TanhNormal,
)

EXAMPLE_BATCH = 4
OBSERVATION = 3
ACTIONS = 2
CHOICES = 5
HIDDEN = 8

# distribution class, distribution kwargs, and whether the network outputs loc/scale
# (continuous) or logits (discrete).
DISTRIBUTIONS = {
    "tanh_normal": (TanhNormal, {"low": -2.0, "high": 2.0}, True),
    "normal": (Normal, {}, True),
    "categorical": (Categorical, {}, False),
    "one_hot": (OneHotCategorical, {}, False),
}


def _observation(batch: int = EXAMPLE_BATCH, features: int = OBSERVATION) -> TensorDict:
    return TensorDict({"observation": torch.randn(batch, features)}, batch_size=[batch])


def _key(head: str | None, name: str):
    return name if head is None else (head, name)


def probabilistic_actor(distribution: str = "tanh_normal", head: str | None = None) -> ProbabilisticActor:
    """A ProbabilisticActor with one of DISTRIBUTIONS, returning its sample_log_prob too."""
    cls, kwargs, continuous = DISTRIBUTIONS[distribution]
    if continuous:
        net = nn.Sequential(nn.Linear(OBSERVATION, 2 * ACTIONS), NormalParamExtractor())
        params = ["loc", "scale"]
    else:
        net = nn.Linear(OBSERVATION, CHOICES)
        params = ["logits"]
    return ProbabilisticActor(
        TensorDictModule(net, in_keys=["observation"], out_keys=[_key(head, p) for p in params]),
        in_keys={p: _key(head, p) for p in params},
        out_keys=[_key(head, "action")],
        distribution_class=cls,
        distribution_kwargs=kwargs,
        return_log_prob=True,
        log_prob_key=_key(head, "sample_log_prob"),
    )


def tanh_normal_actor():
    """PPO/SAC-style bounded actor: observation [3] -> action [2] in [-2, 2], sample_log_prob."""
    torch.manual_seed(0)
    return probabilistic_actor("tanh_normal"), _observation()


def stochastic_actors(heads=tuple(DISTRIBUTIONS)):
    """One ProbabilisticActor per distribution in ``heads``, each under its own key.

    outputs <head>.action, <head>.sample_log_prob and the head's parameters.
    """
    torch.manual_seed(0)
    policy = TensorDictSequential(*(probabilistic_actor(d, head=d) for d in heads))
    return policy, _observation()


def qvalue_actor(action_space: str = "one_hot", head: str | None = None) -> QValueActor:
    net = nn.Sequential(nn.Linear(OBSERVATION, 16), nn.ReLU(), nn.Linear(16, CHOICES))
    return QValueActor(
        net,
        in_keys=["observation"],
        action_space=action_space,
        action_key=_key(head, "action"),
        action_value_key=_key(head, "action_value"),
        chosen_action_value_key=_key(head, "chosen_action_value"),
    )


def qvalue_actors(action_spaces=("one_hot", "categorical")):
    """QValueActors (DQN) over 5 actions, one per action space, each under its own key.

    outputs <space>.action (one-hot [5] or index []), <space>.action_value [5],
    <space>.chosen_action_value [1]
    """
    torch.manual_seed(0)
    policy = TensorDictSequential(*(qvalue_actor(s, head=s) for s in action_spaces))
    return policy, _observation()


def _recurrent_example(rnn, batch: int = EXAMPLE_BATCH, time: tuple[int, ...] = ()) -> TensorDict:
    """Observation, zero recurrent state from the module's primer, and is_init."""
    example = TensorDict(
        {
            "observation": torch.randn(batch, *time, OBSERVATION),
            # First half of the rows start an episode, so an example exercises the reset.
            "is_init": (torch.arange(batch) < batch // 2).reshape(batch, *(1 for _ in time), 1),
        },
        batch_size=[batch, *time],
    )
    for key, spec in rnn.make_tensordict_primer().primers.items(True, True):
        example.set(key, torch.randn(batch, *time, *spec.shape))
    return example


def _recurrent_policy(rnn):
    head = TensorDictModule(nn.Linear(HIDDEN, ACTIONS), in_keys=["embed"], out_keys=["action"])
    return TensorDictSequential(rnn, head)


def lstm_policy():
    """torchrl LSTMModule, single step (its default sequential mode), then a linear head.

    inputs  observation [3], recurrent_state_h/_c [1, 8], is_init [1]
    outputs embed [8], next.recurrent_state_h/_c [1, 8], action [2]
    The LSTMModule reshapes the batch with its literal size, so the artifact has
    the example's static batch (tdaot warns with StaticBatchWarning).
    """
    torch.manual_seed(0)
    rnn = LSTMModule(input_size=OBSERVATION, hidden_size=HIDDEN, in_key="observation", out_key="embed")
    return _recurrent_policy(rnn), _recurrent_example(rnn)


def gru_policy():
    """torchrl GRUModule in its default sequential mode.

    Refused by tdaot build: GRUModule.forward branches on ``is_init.any()`` (a
    data-dependent Python ``if``). Build ``gru_scan_policy`` instead.
    """
    torch.manual_seed(0)
    rnn = GRUModule(input_size=OBSERVATION, hidden_size=HIDDEN, in_key="observation", out_key="embed")
    return _recurrent_policy(rnn), _recurrent_example(rnn)


class ResetOnInit(nn.Module):
    """Zeroes the recurrent state where is_init, as torchrl's sequential mode does."""

    def forward(self, is_init: torch.Tensor, *state: torch.Tensor):
        # is_init is [B, T, 1], the state [B, T, layers, hidden].
        reset = tuple(torch.where(is_init.unsqueeze(-1), torch.zeros_like(s), s) for s in state)
        return reset if len(reset) > 1 else reset[0]


def recurrent_scan_policy(cls=GRUModule):
    """A GRUModule/LSTMModule single step that exports with a dynamic batch.

    The module runs in recurrent mode with the "scan" backend on a time dim of 1
    (no data-dependent branch, no batch reshape); a ResetOnInit module in front
    zeroes the state where is_init, which recurrent mode leaves to the caller.
    inputs  observation [1, 3], is_init [1, 1], recurrent_state* [1, 1, 8]
    outputs embed [1, 8], next.recurrent_state* [1, 1, 8], action [1, 2]
    """
    torch.manual_seed(0)
    rnn = cls(
        input_size=OBSERVATION,
        hidden_size=HIDDEN,
        in_key="observation",
        out_key="embed",
        python_based=True,
        recurrent_backend="scan",
        default_recurrent_mode=True,
    )
    state_keys = rnn.in_keys[1:-1]
    reset = TensorDictModule(ResetOnInit(), in_keys=["is_init", *state_keys], out_keys=state_keys)
    policy = TensorDictSequential(reset, *_recurrent_policy(rnn))
    return policy, _recurrent_example(rnn, time=(1,))


def gru_scan_policy():
    return recurrent_scan_policy(GRUModule)


class ScaleUint8(nn.Module):
    """uint8 pixels [B, H, W, C] -> float [B, C, H, W] in [0, 1], inside the policy."""

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return pixels.permute(0, 3, 1, 2).float() / 255.0


def _pixel_encoder() -> TensorDictModule:
    net = nn.Sequential(
        ScaleUint8(),
        ConvNet(num_cells=[4, 4], kernel_sizes=3, strides=2, activation_class=nn.ReLU),
    )
    return TensorDictModule(net, in_keys=["pixels"], out_keys=["pixels_embed"])


def _pixels(batch: int = EXAMPLE_BATCH) -> torch.Tensor:
    return torch.randint(0, 256, (batch, 16, 16, 3), dtype=torch.uint8)


def pixels_policy():
    """A ConvNet on uint8 camera images: pixels [16, 16, 3] uint8 -> action [2]."""
    torch.manual_seed(0)
    policy = TensorDictSequential(
        _pixel_encoder(),
        TensorDictModule(
            MLP(out_features=ACTIONS, num_cells=[16]), in_keys=["pixels_embed"], out_keys=["action"]
        ),
    )
    example = TensorDict({"pixels": _pixels()}, batch_size=[EXAMPLE_BATCH])
    return policy, example


def pixels_and_vector_policy():
    """Pixels [16, 16, 3] uint8 and a proprioceptive vector [3] -> action [2]."""
    torch.manual_seed(0)
    policy = TensorDictSequential(
        _pixel_encoder(),
        TensorDictModule(
            MLP(out_features=ACTIONS, num_cells=[16]),
            in_keys=["pixels_embed", "observation"],
            out_keys=["action"],
        ),
    )
    example = _observation().update({"pixels": _pixels()})
    return policy, example


AGENTS = 3


def _agent_mlp(outputs: int, *, centralized: bool, share_params: bool, use_td_params=False):
    # use_td_params=False: torch.export cannot swap parameters held in a TensorDictParams.
    return MultiAgentMLP(
        OBSERVATION,
        outputs,
        AGENTS,
        centralized=centralized,
        share_params=share_params,
        depth=1,
        num_cells=16,
        use_td_params=use_td_params,
    )


def multi_agent_policy():
    """torchrl MultiAgentMLP on keys three levels deep, agent dim after the batch dim.

    inputs  group.agents.observation [3 agents, 3]
    outputs group.agents.action [3, 2] (decentralised, separate parameters per agent),
            group.agents.value [3, 1] (a centralised critic with shared parameters)
    """
    torch.manual_seed(0)
    obs = ("group", "agents", "observation")
    policy = TensorDictSequential(
        TensorDictModule(
            _agent_mlp(ACTIONS, centralized=False, share_params=False),
            in_keys=[obs],
            out_keys=[("group", "agents", "action")],
        ),
        TensorDictModule(
            _agent_mlp(1, centralized=True, share_params=True),
            in_keys=[obs],
            out_keys=[("group", "agents", "value")],
        ),
    )
    agents = TensorDict(
        {"observation": torch.randn(EXAMPLE_BATCH, AGENTS, OBSERVATION)}, batch_size=[EXAMPLE_BATCH, AGENTS]
    )
    example = TensorDict({"group": {"agents": agents}}, batch_size=[EXAMPLE_BATCH])
    return policy, example


def multi_agent_td_params_policy():
    """MultiAgentMLP with its default use_td_params=True: tdaot build refuses it with a hint."""
    torch.manual_seed(0)
    policy = TensorDictModule(
        _agent_mlp(ACTIONS, centralized=False, share_params=False, use_td_params=True),
        in_keys=["observation"],
        out_keys=["action"],
    )
    example = TensorDict({"observation": torch.randn(EXAMPLE_BATCH, AGENTS, OBSERVATION)}, [EXAMPLE_BATCH])
    return policy, example


def freeze_flag(module: nn.Module, name: str) -> None:
    """Turns a 0-dim bool buffer that only configures ``module`` into a Python bool.

    torch.export treats buffers as symbolic, so a Python ``if`` on one is a
    data-dependent branch (ObservationNorm's ``if self.standard_normal:``).
    """
    value = bool(module.get_buffer(name))
    delattr(module, name)
    setattr(module, name, value)


def observation_norm_policy():
    """torchrl ObservationNorm as it comes: tdaot build refuses it (see freeze_flag)."""
    return _normalized(freeze=False)


def normalized_policy():
    """torchrl ObservationNorm baked in front of an actor: raw sensor values in, action out.

    The normaliser's statistics are fitted on recorded raw observations (as
    ObservationNorm.init_stats does on env rollouts), then frozen into the artifact.
    inputs  observation [3] (raw, offset and scaled far from unit range)
    outputs observation_norm [3], action [2]
    """
    return _normalized(freeze=True)


def _normalized(freeze: bool):
    torch.manual_seed(0)
    raw = torch.randn(256, OBSERVATION) * torch.tensor([100.0, 0.01, 5.0]) + torch.tensor([1e3, -2.0, 0.5])
    norm = ObservationNorm(
        loc=raw.mean(0),
        scale=raw.std(0),
        in_keys=["observation"],
        out_keys=["observation_norm"],
        standard_normal=True,
    )
    if freeze:
        freeze_flag(norm, "standard_normal")
    actor = TensorDictModule(
        MLP(OBSERVATION, ACTIONS, num_cells=[16], activation_class=nn.Tanh),
        in_keys=["observation_norm"],
        out_keys=["action"],
    )
    example = TensorDict({"observation": raw[:EXAMPLE_BATCH].clone()}, batch_size=[EXAMPLE_BATCH])
    return TensorDictSequential(norm, actor), example


class _MixedDtypes(nn.Module):
    """A float64 and a bfloat16 branch, fed by an int64 index and a bool mask."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(CHOICES, OBSERVATION, dtype=torch.float64)
        self.precise = nn.Linear(OBSERVATION, ACTIONS, dtype=torch.float64)
        self.fast = nn.Linear(OBSERVATION, ACTIONS, dtype=torch.bfloat16)

    def forward(self, precise, fast, mode, enabled):
        action64 = self.precise(precise + self.embed(mode))
        action64 = torch.where(enabled, action64, torch.zeros_like(action64))
        return action64, torch.tanh(self.fast(fast)), enabled.logical_not()


def dtype_policy():
    """float64 and bfloat16 parameters and inputs, an int64 and a bool input.

    inputs  precise [3] float64, fast [3] bfloat16, mode [] int64, enabled [1] bool
    outputs action64 [2] float64, action_bf16 [2] bfloat16, disabled [1] bool
    """
    torch.manual_seed(0)
    policy = TensorDictModule(
        _MixedDtypes(),
        in_keys=["precise", "fast", "mode", "enabled"],
        out_keys=["action64", "action_bf16", "disabled"],
    )
    example = TensorDict(
        {
            "precise": torch.randn(EXAMPLE_BATCH, OBSERVATION, dtype=torch.float64),
            "fast": torch.randn(EXAMPLE_BATCH, OBSERVATION, dtype=torch.bfloat16),
            "mode": torch.arange(EXAMPLE_BATCH) % CHOICES,
            "enabled": (torch.arange(EXAMPLE_BATCH) % 2 == 0).unsqueeze(-1),
        },
        batch_size=[EXAMPLE_BATCH],
    )
    return policy, example
