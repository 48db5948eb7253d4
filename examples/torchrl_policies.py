"""torchrl policies that tdaot builds: the families people train, kept tiny.

Each public factory returns ``(policy, example_tensordict)``, the form
``tdaot build examples/torchrl_policies.py:FACTORY -o OUT.pt2`` expects. tdaot itself
does not import torchrl; these examples and the tests do.

Heads that share one artifact (``stochastic_actors``, ``qvalue_actors``) nest their
keys under the head's name, so one package carries several families side by side.
"""

from __future__ import annotations

import copy

import torch
from tensordict import TensorDict
from tensordict.nn import InteractionType, NormalParamExtractor, TensorDictModule, TensorDictSequential
from torch import nn
from torch.distributions import Categorical, Normal
from torchrl.data import Bounded
from torchrl.envs.transforms import ObservationNorm
from torchrl.modules import (
    MLP,
    ActorCriticWrapper,
    ConvNet,
    GRUModule,
    LSTMModule,
    MultiAgentConvNet,
    MultiAgentMLP,
    OneHotCategorical,
    ProbabilisticActor,
    QValueActor,
    TanhDelta,
    TanhNormal,
    ValueOperator,
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


def _recurrent_example(*rnns, batch: int = EXAMPLE_BATCH, time: tuple[int, ...] = ()) -> TensorDict:
    """Observation, random recurrent state from each module's primer, and is_init."""
    example = TensorDict(
        {
            "observation": torch.randn(batch, *time, OBSERVATION),
            # First half of the rows start an episode, so an example exercises the reset.
            "is_init": (torch.arange(batch) < batch // 2)
            .reshape(batch, *(1 for _ in time), 1)
            .expand(batch, *time, 1),
        },
        batch_size=[batch, *time],
    )
    for rnn in rnns:
        for key, spec in rnn.make_tensordict_primer().primers.items(True, True):
            example.set(key, torch.randn(batch, *time, *spec.shape))
    return example


def _rnn(cls, **options):
    """A torchrl GRUModule/LSTMModule reading observation [3], writing embed [8]."""
    return cls(input_size=OBSERVATION, hidden_size=HIDDEN, in_key="observation", out_key="embed", **options)


def _recurrent_policy(rnn):
    head = TensorDictModule(nn.Linear(HIDDEN, ACTIONS), in_keys=["embed"], out_keys=["action"])
    return TensorDictSequential(rnn, head)


def lstm_policy():
    """torchrl LSTMModule as it comes (single step, its default mode), then a linear head.

    inputs  observation [3], recurrent_state_h/_c [1, 8], is_init [1]
    outputs embed [8], next.recurrent_state_h/_c [1, 8], action [2]
    Dynamic batch, through tdaot's ``rnn_single_step`` rewrite.
    """
    torch.manual_seed(0)
    rnn = _rnn(LSTMModule)
    return _recurrent_policy(rnn), _recurrent_example(rnn)


def gru_policy():
    """torchrl GRUModule as it comes (single step), then a linear head; dynamic batch.

    inputs  observation [3], recurrent_state [1, 8], is_init [1]
    outputs embed [8], next.recurrent_state [1, 8], action [2]
    """
    torch.manual_seed(0)
    rnn = _rnn(GRUModule)
    return _recurrent_policy(rnn), _recurrent_example(rnn)


RNNS = {
    "gru": (GRUModule, False),
    "gru_python": (GRUModule, True),
    "lstm": (LSTMModule, False),
    "lstm_python": (LSTMModule, True),
}


def _keyed_rnn(name: str):
    """One of RNNS with its keys under ``name`` (is_init stays at the root: torchrl reads it there)."""
    cls, python_based = RNNS[name]
    states = ["recurrent_state"] if cls is GRUModule else ["recurrent_state_h", "recurrent_state_c"]
    return cls(
        input_size=OBSERVATION,
        hidden_size=HIDDEN,
        python_based=python_based,
        in_keys=["observation", *((name, k) for k in states), "is_init"],
        out_keys=[(name, "embed"), *(("next", name, k) for k in states)],
    )


def recurrent_policies(names=tuple(RNNS)):
    """GRUModule and LSTMModule single steps as they come (python_based False and True), side
    by side: each reads the observation and is_init and keeps its state under its name.

    outputs <name>.embed [8], <name>.action [2], next.<name>.recurrent_state* [1, 8]
    """
    torch.manual_seed(0)
    rnns = [_keyed_rnn(name) for name in names]
    heads = [
        TensorDictModule(nn.Linear(HIDDEN, ACTIONS), in_keys=[(n, "embed")], out_keys=[(n, "action")])
        for n in names
    ]
    policy = TensorDictSequential(*(m for pair in zip(rnns, heads) for m in pair))
    return policy, _recurrent_example(*rnns)


def gru_sequence_policy():
    """GRUModule in recurrent mode with its default "pad" backend: refused by tdaot build.

    Splitting a time window at each is_init is a branch on is_init's values; a time dim of
    1 with the "scan" backend (``gru_scan_policy``) or single-step mode builds instead.
    """
    torch.manual_seed(0)
    rnn = _rnn(GRUModule, default_recurrent_mode=True)
    return _recurrent_policy(rnn), _recurrent_example(rnn, time=(3,))


class ResetOnInit(nn.Module):
    """Zeroes the recurrent state where is_init, as torchrl's sequential mode does."""

    def forward(self, is_init: torch.Tensor, *state: torch.Tensor):
        # is_init is [B, T, 1], the state [B, T, layers, hidden].
        reset = tuple(torch.where(is_init.unsqueeze(-1), torch.zeros_like(s), s) for s in state)
        return reset if len(reset) > 1 else reset[0]


def recurrent_scan_policy(cls=GRUModule):
    """A GRUModule/LSTMModule single step through recurrent mode (static batch: AOTInductor
    compiles the scan only with a concrete batch; ``gru_policy`` as it comes is dynamic).

    The module runs in recurrent mode with the "scan" backend on a time dim of 1
    (no data-dependent branch, no batch reshape); a ResetOnInit module in front
    zeroes the state where is_init, which recurrent mode leaves to the caller.
    inputs  observation [1, 3], is_init [1, 1], recurrent_state* [1, 1, 8]
    outputs embed [1, 8], next.recurrent_state* [1, 1, 8], action [1, 2]
    """
    torch.manual_seed(0)
    rnn = _rnn(cls, python_based=True, recurrent_backend="scan", default_recurrent_mode=True)
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
# (centralized, share_params) for each multi-agent head, named as its keys are.
AGENT_SETUPS = {
    "decentralised": (False, False),
    "decentralised_shared": (False, True),
    "centralised": (True, False),
    "centralised_shared": (True, True),
}
AGENT_PIXELS = (3, 8, 8)  # channels, height, width per agent


def multi_agent_policy(setups=tuple(AGENT_SETUPS)):
    """torchrl MultiAgentMLP and MultiAgentConvNet as they come (TensorDictParams, their
    default), one of each per AGENT_SETUPS entry, on keys three levels deep with the agent
    dim after the batch dim. Dynamic batch, through tdaot's
    ``tensordict_params_as_parameters`` rewrite.

    inputs  group.agents.observation [3 agents, 3], group.agents.pixels [3, 3, 8, 8]
    outputs group.agents.<setup>.action [3, 2] (MLP), group.agents.<setup>.embed [3, 16] (ConvNet)
    """
    torch.manual_seed(0)
    agents = ("group", "agents")
    modules = []
    for name in setups:
        centralized, share_params = AGENT_SETUPS[name]
        mlp = MultiAgentMLP(
            OBSERVATION,
            ACTIONS,
            AGENTS,
            centralized=centralized,
            share_params=share_params,
            depth=1,
            num_cells=16,
        )
        conv = MultiAgentConvNet(
            AGENTS,
            centralized=centralized,
            share_params=share_params,
            in_features=AGENT_PIXELS[0],
            num_cells=[4, 4],
            kernel_sizes=3,
        )
        modules += [
            TensorDictModule(mlp, in_keys=[(*agents, "observation")], out_keys=[(*agents, name, "action")]),
            TensorDictModule(conv, in_keys=[(*agents, "pixels")], out_keys=[(*agents, name, "embed")]),
        ]
    per_agent = TensorDict(
        {
            "observation": torch.randn(EXAMPLE_BATCH, AGENTS, OBSERVATION),
            "pixels": torch.randn(EXAMPLE_BATCH, AGENTS, *AGENT_PIXELS),
        },
        batch_size=[EXAMPLE_BATCH, AGENTS],
    )
    return TensorDictSequential(*modules), TensorDict(
        {"group": {"agents": per_agent}}, batch_size=[EXAMPLE_BATCH]
    )


class StackedEnsemble(nn.Module):
    """Two small networks whose parameters are stacked in one TensorDictParams, run under vmap
    (a hand-written cousin of the multi-agent networks, which tdaot does not rewrite)."""

    def __init__(self, members: int = 2) -> None:
        super().__init__()
        nets = [nn.Sequential(nn.Linear(OBSERVATION, ACTIONS)) for _ in range(members)]
        self.params = TensorDict.from_modules(*nets, as_module=True)
        self.net = copy.deepcopy(nets[0]).to("meta")

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        def member(params, observation):
            with params.to_module(self.net):
                return self.net(observation)

        return torch.vmap(member, (0, None))(self.params, observation).mean(0)


def stacked_ensemble_policy():
    """StackedEnsemble: refused by tdaot build with the TensorDictParams hint."""
    torch.manual_seed(0)
    policy = TensorDictModule(StackedEnsemble(), in_keys=["observation"], out_keys=["action"])
    return policy, _observation()


# Raw sensor values far from unit range: offset and scale per feature.
RAW_SCALE, RAW_OFFSET = torch.tensor([100.0, 0.01, 5.0]), torch.tensor([1e3, -2.0, 0.5])


def normalized_policy():
    """torchrl ObservationNorm as it comes, three ways, in front of an actor: raw sensor values
    in, action out. The statistics are fitted on recorded raw observations (as
    ObservationNorm.init_stats does on env rollouts) and baked into the artifact through
    tdaot's ``observation_norm_flag`` rewrite.

    - observation -> observation_norm, standard_normal=True ((x - loc) / scale)
    - velocity -> velocity_norm, standard_normal=False (x * scale + loc)
    - position -> position, in place (the same key in and out)
    outputs observation_norm, velocity_norm, position [3] each, action [2]
    """
    torch.manual_seed(0)
    raw = {
        key: torch.randn(256, OBSERVATION) * RAW_SCALE + RAW_OFFSET
        for key in ("observation", "velocity", "position")
    }

    def norm(key, out_key, standard_normal):
        mean, std = raw[key].mean(0), raw[key].std(0)
        loc, scale = (mean, std) if standard_normal else (-mean / std, 1 / std)
        return ObservationNorm(
            loc=loc, scale=scale, in_keys=[key], out_keys=[out_key], standard_normal=standard_normal
        )

    actor = TensorDictModule(
        MLP(3 * OBSERVATION, ACTIONS, num_cells=[16], activation_class=nn.Tanh),
        in_keys=["observation_norm", "velocity_norm", "position"],
        out_keys=["action"],
    )
    policy = TensorDictSequential(
        norm("observation", "observation_norm", True),
        norm("velocity", "velocity_norm", False),
        norm("position", "position", True),
        actor,
    )
    example = TensorDict({k: v[:EXAMPLE_BATCH].clone() for k, v in raw.items()}, batch_size=[EXAMPLE_BATCH])
    return policy, example


# --- actor-critic families (DDPG/TD3, SAC, critics, ActorCriticWrapper) ---------------
def _bounds() -> Bounded:
    return Bounded(low=-2.0, high=2.0, shape=(ACTIONS,))


def ddpg_actor(head: str | None = None) -> ProbabilisticActor:
    """DDPG/TD3 actor as torchrl's examples build it: MLP -> param, TanhDelta in the bounds."""
    spec = _bounds()
    net = TensorDictModule(
        MLP(OBSERVATION, ACTIONS, num_cells=[16]), in_keys=["observation"], out_keys=[_key(head, "param")]
    )
    return ProbabilisticActor(
        net,
        in_keys={"param": _key(head, "param")},
        out_keys=[_key(head, "action")],
        spec=spec if head is None else None,
        distribution_class=TanhDelta,
        distribution_kwargs={"low": spec.space.low, "high": spec.space.high},
    )


def sac_actor(head: str | None = None) -> ProbabilisticActor:
    """SAC actor as torchrl's SAC example builds it: TanhNormal in the bounds, sampling by
    default, returning the log-prob of its action."""
    spec = _bounds()
    net = TensorDictModule(
        nn.Sequential(MLP(OBSERVATION, 2 * ACTIONS, num_cells=[16]), NormalParamExtractor()),
        in_keys=["observation"],
        out_keys=[_key(head, "loc"), _key(head, "scale")],
    )
    return ProbabilisticActor(
        net,
        in_keys={"loc": _key(head, "loc"), "scale": _key(head, "scale")},
        out_keys=[_key(head, "action")],
        spec=spec if head is None else None,
        distribution_class=TanhNormal,
        distribution_kwargs={"low": spec.space.low, "high": spec.space.high, "tanh_loc": False},
        default_interaction_type=InteractionType.RANDOM,
        return_log_prob=True,
        log_prob_key=_key(head, "action_log_prob"),
    )


def actor_critic_policy_operator(head: str | None = None) -> TensorDictModule:
    """ActorCriticWrapper(policy, value).get_policy_operator(): the policy half, as PPO
    deploys it (TanhNormal, returning the log-prob of its action)."""
    actor = ProbabilisticActor(
        TensorDictModule(
            nn.Sequential(MLP(OBSERVATION, 2 * ACTIONS, num_cells=[16]), NormalParamExtractor()),
            in_keys=["observation"],
            out_keys=[_key(head, "loc"), _key(head, "scale")],
        ),
        in_keys={"loc": _key(head, "loc"), "scale": _key(head, "scale")},
        out_keys=[_key(head, "action")],
        distribution_class=TanhNormal,
        return_log_prob=True,
        log_prob_key=_key(head, "action_log_prob"),
    )
    value = ValueOperator(
        MLP(OBSERVATION, 1, num_cells=[16]), in_keys=["observation"], out_keys=[_key(head, "state_value")]
    )
    return ActorCriticWrapper(actor, value).get_policy_operator()


# The outputs actor_critic_families keeps; the other keys its modules write are dropped.
FAMILY_OUTPUTS = [
    ("ddpg", "action"),
    ("sac", "action"),
    ("sac", "action_log_prob"),
    "state_value",
    ("ddpg", "state_action_value"),
    ("ppo", "action"),
    ("ppo", "action_log_prob"),
]


def actor_critic_families():
    """A TensorDictSequential of a DDPG/TD3 actor (TanhDelta), a SAC actor with its log-prob,
    ValueOperator critics (state value, and a Q-value of the DDPG action) and an
    ActorCriticWrapper's policy operator, each under its own key; ``selected_out_keys``
    drops the intermediate keys (param, loc, scale).

    outputs FAMILY_OUTPUTS: ddpg.action [2], sac.action [2], sac.action_log_prob [],
            state_value [1], ddpg.state_action_value [1], ppo.action [2], ppo.action_log_prob []
    """
    torch.manual_seed(0)
    critic = ValueOperator(MLP(OBSERVATION, 1, num_cells=[16]), in_keys=["observation"])
    q_critic = ValueOperator(
        MLP(OBSERVATION + ACTIONS, 1, num_cells=[16]),
        in_keys=["observation", ("ddpg", "action")],
        out_keys=[("ddpg", "state_action_value")],
    )
    policy = TensorDictSequential(
        ddpg_actor("ddpg"),
        sac_actor("sac"),
        critic,
        q_critic,
        actor_critic_policy_operator("ppo"),
        selected_out_keys=FAMILY_OUTPUTS,
    )
    return policy, _observation()


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
