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
