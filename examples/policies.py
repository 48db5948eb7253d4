"""Example policies for `make demo`, the docs and the tests.

Each factory returns ``(policy, example_tensordict)``, the form ``tdaot build
examples/policies.py:FACTORY -o OUT.pt2`` expects.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from tensordict.nn import (
    NormalParamExtractor,
    ProbabilisticTensorDictModule,
    TensorDictModule,
    TensorDictSequential,
)
from torch import nn
from torch.distributions import Normal

EXAMPLE_BATCH = 4


def tutorial_policy():
    """The tensordict export tutorial's policy: an MLP head feeding a Normal distribution.

    observation [3] -> loc, scale [2] -> sample [2] (the mean when deterministic).
    """
    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Linear(3, 64), nn.ReLU(), nn.Linear(64, 4), NormalParamExtractor())
    policy = TensorDictSequential(
        TensorDictModule(backbone, in_keys=["observation"], out_keys=["loc", "scale"]),
        ProbabilisticTensorDictModule(
            in_keys=["loc", "scale"], out_keys=["sample"], distribution_class=Normal
        ),
    )
    example = TensorDict({"observation": torch.randn(EXAMPLE_BATCH, 3)}, batch_size=[EXAMPLE_BATCH])
    return policy, example


class _Coordinator(nn.Module):
    """Joint command from the robot's joints and the mean of the agents' observations."""

    def __init__(self, agent_features: int, joints: int) -> None:
        super().__init__()
        self.agents = nn.Linear(agent_features, joints)
        self.joints = nn.Linear(joints, joints)

    def forward(self, agent_observation: torch.Tensor, joints: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.joints(joints) + self.agents(agent_observation).mean(dim=-2))


def nested_policy():
    """Nested in and out keys, with an agent dim after the batch dim.

    inputs  agents.observation [2 agents, 5], robot.joints [7]
    outputs agents.action [2, 2], robot.command [7]
    """
    torch.manual_seed(0)
    agents, features, joints = 2, 5, 7
    policy = TensorDictSequential(
        TensorDictModule(
            nn.Sequential(nn.Linear(features, 32), nn.Tanh(), nn.Linear(32, 2)),
            in_keys=[("agents", "observation")],
            out_keys=[("agents", "action")],
        ),
        TensorDictModule(
            _Coordinator(features, joints),
            in_keys=[("agents", "observation"), ("robot", "joints")],
            out_keys=[("robot", "command")],
        ),
    )
    example = TensorDict(
        {
            "agents": TensorDict(
                {"observation": torch.randn(EXAMPLE_BATCH, agents, features)},
                batch_size=[EXAMPLE_BATCH, agents],
            ),
            "robot": {"joints": torch.randn(EXAMPLE_BATCH, joints)},
        },
        batch_size=[EXAMPLE_BATCH],
    )
    return policy, example


class _RecurrentCell(nn.Module):
    """A GRU-like cell: zeroes its state where is_init, returns the action and the new state."""

    def __init__(self, features: int, hidden: int, actions: int) -> None:
        super().__init__()
        self.cell = nn.GRUCell(features, hidden)
        self.head = nn.Linear(hidden, actions)

    def forward(self, observation, hidden, is_init):
        hidden = torch.where(is_init, torch.zeros_like(hidden), hidden)
        hidden = self.cell(observation, hidden)
        return self.head(hidden), hidden


def recurrent_policy():
    """A recurrent policy in torchrl's convention, without torchrl.

    inputs  observation [3], hidden [8], is_init bool [1]
    outputs action [2], next.hidden [8]  (next.hidden feeds hidden at the next step)
    """
    torch.manual_seed(0)
    policy = TensorDictModule(
        _RecurrentCell(3, 8, 2),
        in_keys=["observation", "hidden", "is_init"],
        out_keys=["action", ("next", "hidden")],
    )
    example = TensorDict(
        {
            "observation": torch.randn(EXAMPLE_BATCH, 3),
            "hidden": torch.zeros(EXAMPLE_BATCH, 8),
            "is_init": torch.ones(EXAMPLE_BATCH, 1, dtype=torch.bool),
        },
        batch_size=[EXAMPLE_BATCH],
    )
    return policy, example


class _SafetyBranch(nn.Module):
    """torch.cond on a tensor predicate: a fallback action when any observation is out of range."""

    def __init__(self, limit: float = 3.0) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 2))
        self.limit = limit

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        def act(obs):
            return torch.tanh(self.net(obs))

        def fallback(obs):
            return torch.zeros(obs.shape[0], 2, dtype=obs.dtype)

        return torch.cond(observation.abs().amax() > self.limit, fallback, act, (observation,))


def safety_policy():
    """A safety switch written the exportable way (torch.cond): observation [3] -> action [2]."""
    torch.manual_seed(0)
    policy = TensorDictModule(_SafetyBranch(), in_keys=["observation"], out_keys=["action"])
    example = TensorDict({"observation": torch.randn(EXAMPLE_BATCH, 3)}, batch_size=[EXAMPLE_BATCH])
    return policy, example


class _HorizonRollout(nn.Module):
    """scan over a short horizon: roll a learned dynamics model forward, return the costs."""

    def __init__(self, horizon: int = 5) -> None:
        super().__init__()
        self.dynamics = nn.Linear(3, 3)
        self.horizon = horizon

    def forward(self, observation: torch.Tensor):
        from torch._higher_order_ops.scan import scan

        def step(state, _):
            following = torch.tanh(self.dynamics(state))
            return following, following.square().sum(-1)

        steps = torch.zeros(self.horizon, observation.shape[0], 1, dtype=observation.dtype)
        final, costs = scan(step, observation, steps)
        return final, costs.transpose(0, 1)


def horizon_policy():
    """torch scan over a 5-step horizon: observation [3] -> final [3], costs [5].

    AOTInductor (torch 2.13) compiles scan only with a concrete batch, so the
    artifact falls back to the example's static batch, with a warning.
    """
    torch.manual_seed(0)
    policy = TensorDictModule(_HorizonRollout(), in_keys=["observation"], out_keys=["final", "costs"])
    example = TensorDict({"observation": torch.randn(EXAMPLE_BATCH, 3)}, batch_size=[EXAMPLE_BATCH])
    return policy, example


# A Unitree Go2-like quadruped in Isaac Lab's joint order.
LEGGED_JOINTS = tuple(
    f"{leg}_{part}_joint" for part in ("hip", "thigh", "calf") for leg in ("FL", "FR", "RL", "RR")
)
LEGGED_DEFAULT_POS = (0.1, -0.1, 0.1, -0.1, 0.8, 0.8, 1.0, 1.0, -1.5, -1.5, -1.5, -1.5)
LEGGED_LOWER = (-1.05, -1.05, -1.05, -1.05, -1.57, -1.57, -0.52, -0.52, -2.72, -2.72, -2.72, -2.72)
LEGGED_UPPER = (1.05, 1.05, 1.05, 1.05, 3.49, 3.49, 4.54, 4.54, -0.84, -0.84, -0.84, -0.84)
# The observation, Isaac Lab's velocity-tracking layout: 48 elements and their scales.
_LEGGED_OBSERVATION = (
    ("base_lin_vel", ("x", "y", "z"), 2.0),
    ("base_ang_vel", ("x", "y", "z"), 0.25),
    ("projected_gravity", ("x", "y", "z"), 1.0),
    ("velocity_command", ("x", "y", "yaw"), 1.0),
    ("joint_pos_rel", LEGGED_JOINTS, 1.0),
    ("joint_vel", LEGGED_JOINTS, 0.05),
    ("last_action", LEGGED_JOINTS, 1.0),
)
LEGGED_OBSERVATION_NAMES = tuple(
    f"{group}.{name}" for group, names, _ in _LEGGED_OBSERVATION for name in names
)
LEGGED_OBSERVATION_SCALE = tuple(scale for _, names, scale in _LEGGED_OBSERVATION for _ in names)


def legged_contract():
    """The deployment contract of :func:`legged_policy`: 50 Hz; observations scaled and clipped
    to +-100; actions are joint position targets = 0.25 * raw + default pose, within the joint
    limits, moving at most 0.2 rad per step."""
    import tdaot

    return tdaot.Contract(
        control_dt=0.02,
        inputs={
            "observation": tdaot.Signal(
                names=LEGGED_OBSERVATION_NAMES, scale=LEGGED_OBSERVATION_SCALE, low=-100.0, high=100.0
            )
        },
        outputs={
            "action": tdaot.Signal(
                names=LEGGED_JOINTS,
                scale=0.25,
                offset=LEGGED_DEFAULT_POS,
                low=LEGGED_LOWER,
                high=LEGGED_UPPER,
                max_delta=0.2,
            )
        },
        metadata={"robot": "go2", "policy": "flat-walk-example"},
    )


def legged_policy():
    """A 12-joint locomotion actor: observation [48] (base linear and angular velocity,
    projected gravity, velocity command, joint positions relative to the default pose, joint
    velocities, last action) -> action [12] (joint position offsets, raw). Build it with
    ``contract=legged_contract()`` (``tdaot build --contract``: a TOML file of its fields)."""
    torch.manual_seed(0)
    actor = nn.Sequential(nn.Linear(48, 64), nn.ELU(), nn.Linear(64, 64), nn.ELU(), nn.Linear(64, 12))
    policy = TensorDictModule(actor, in_keys=["observation"], out_keys=["action"])
    example = TensorDict({"observation": torch.randn(EXAMPLE_BATCH, 48)}, batch_size=[EXAMPLE_BATCH])
    return policy, example
