"""The benchmark's policies: factories returning ``(policy, example_tensordict)``.

Each factory seeds torch itself, so every process that calls it gets the same weights;
the benchmark also checks every runtime's outputs against eager before timing it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples.policies import tutorial_policy  # noqa: E402

EXAMPLE_BATCH = 4


def mlp_actor():
    """A legged-robot-sized actor: observation [48] -> 256 -> 256 -> action [12] (ELU)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(48, 256), nn.ELU(), nn.Linear(256, 256), nn.ELU(), nn.Linear(256, 12))
    policy = TensorDictModule(net, in_keys=["observation"], out_keys=["action"])
    example = TensorDict({"observation": torch.randn(EXAMPLE_BATCH, 48)}, batch_size=[EXAMPLE_BATCH])
    return policy, example


class _PixelEncoder(nn.Module):
    """uint8 pixels [3, 64, 64] -> action [12]: three convolutions and an MLP head."""

    def __init__(self, actions: int = 12) -> None:
        super().__init__()
        self.convs = nn.Sequential(
            nn.Conv2d(3, 16, 8, stride=4),
            nn.ReLU(),  # -> 16 x 15 x 15
            nn.Conv2d(16, 32, 4, stride=2),
            nn.ReLU(),  # -> 32 x 6 x 6
            nn.Conv2d(32, 32, 3, stride=1),
            nn.ReLU(),  # -> 32 x 4 x 4
            nn.Flatten(),
        )
        self.head = nn.Sequential(nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, actions))

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.head(self.convs(pixels.float() / 255.0))


def conv_actor():
    """A ConvNet actor on uint8 pixels [3, 64, 64] -> action [12]."""
    torch.manual_seed(0)
    return _pixel_actor(_PixelEncoder(), (3, 64, 64))


class NatureCNN(nn.Module):
    """The DQN network (Mnih et al. 2015) on 4 stacked 84 x 84 frames."""

    def __init__(self) -> None:
        super().__init__()
        self.convs = nn.Sequential(
            nn.Conv2d(4, 32, 8, 4), nn.ReLU(), nn.Conv2d(32, 64, 4, 2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, 1), nn.ReLU(), nn.Flatten(),
        )  # fmt: skip
        self.head = nn.Sequential(nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, 6))

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.head(self.convs(pixels.float() / 255.0))


class _Residual(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.a = nn.Conv2d(channels, channels, 3, padding=1)
        self.b = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.b(torch.relu(self.a(torch.relu(x))))


class ImpalaCNN(nn.Module):
    """The IMPALA ResNet (Espeholt et al. 2018) as Procgen agents use it: three stages of a 3x3
    convolution, a 3x3 max pool of stride 2 and two residual blocks (16, 32, 32 channels)."""

    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3
        for out in (16, 32, 32):
            layers += [nn.Conv2d(channels, out, 3, padding=1), nn.MaxPool2d(3, 2, padding=1)]
            layers += [_Residual(out), _Residual(out)]
            channels = out
        self.convs = nn.Sequential(*layers, nn.ReLU(), nn.Flatten())
        self.head = nn.Sequential(nn.Linear(32 * 8 * 8, 256), nn.ReLU(), nn.Linear(256, 15))

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.head(self.convs(pixels.float() / 255.0))


def _pixel_actor(network: nn.Module, shape: tuple[int, ...]):
    policy = TensorDictModule(network, in_keys=["pixels"], out_keys=["action"])
    pixels = torch.randint(0, 256, (EXAMPLE_BATCH, *shape), dtype=torch.uint8)
    return policy, TensorDict({"pixels": pixels}, batch_size=[EXAMPLE_BATCH])


def nature_actor():
    """The Nature CNN on uint8 frames [4, 84, 84] -> action [6]."""
    torch.manual_seed(0)
    return _pixel_actor(NatureCNN(), (4, 84, 84))


def impala_actor():
    """The IMPALA ResNet on uint8 pixels [3, 64, 64] -> action [15]."""
    torch.manual_seed(0)
    return _pixel_actor(ImpalaCNN(), (3, 64, 64))


class HeightMapEncoder(nn.Module):
    """A legged-locomotion actor with a terrain encoder: a 1 x 32 x 32 height map (3.2 m square
    at 10 cm around the base, float heights) through three convolutions to 128 features, joined
    with the 48 proprioceptive observations, then 256 -> 128 -> 12 joint targets (ELU)."""

    def __init__(self) -> None:
        super().__init__()
        self.terrain = nn.Sequential(
            nn.Conv2d(1, 16, 5, stride=2, padding=2), nn.ELU(),  # -> 16 x 16 x 16
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ELU(),  # -> 32 x 8 x 8
            nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.ELU(),  # -> 32 x 4 x 4
            nn.Flatten(), nn.Linear(512, 128), nn.ELU(),
        )  # fmt: skip
        self.head = nn.Sequential(
            nn.Linear(48 + 128, 256), nn.ELU(), nn.Linear(256, 128), nn.ELU(), nn.Linear(128, 12)
        )

    def forward(self, observation: torch.Tensor, height_map: torch.Tensor) -> torch.Tensor:
        return self.head(torch.cat([observation, self.terrain(height_map)], dim=-1))


def heightmap_actor():
    """The height-map encoder: observation [48] and height_map [1, 32, 32] -> action [12]."""
    torch.manual_seed(0)
    policy = TensorDictModule(HeightMapEncoder(), in_keys=["observation", "height_map"], out_keys=["action"])
    example = TensorDict(
        {"observation": torch.randn(EXAMPLE_BATCH, 48), "height_map": torch.randn(EXAMPLE_BATCH, 1, 32, 32)},
        batch_size=[EXAMPLE_BATCH],
    )
    return policy, example


def wide_mlp_actor():
    """A wide actor: observation [96] -> 1024 -> 1024 -> action [24] (SiLU)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(96, 1024), nn.SiLU(), nn.Linear(1024, 1024), nn.SiLU(), nn.Linear(1024, 24))
    policy = TensorDictModule(net, in_keys=["observation"], out_keys=["action"])
    example = TensorDict({"observation": torch.randn(EXAMPLE_BATCH, 96)}, batch_size=[EXAMPLE_BATCH])
    return policy, example


class _LSTMStep(nn.Module):
    """One step of an nn.LSTM with (h, c) carried by the caller, zeroed where is_init.

    torchrl's LSTMModule specialises the batch dim under torch.export (tdaot would fall
    back to a static batch, so one artifact could not serve batch 1, 64 and 4096); a
    plain nn.LSTM stepped once per call exports with a dynamic batch.
    """

    def __init__(self, features: int = 48, hidden: int = 128, actions: int = 12) -> None:
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, batch_first=True)
        self.head = nn.Linear(hidden, actions)

    def forward(self, observation, h, c, is_init):
        h = torch.where(is_init, torch.zeros_like(h), h)
        c = torch.where(is_init, torch.zeros_like(c), c)
        out, (h, c) = self.lstm(observation.unsqueeze(1), (h.unsqueeze(0), c.unsqueeze(0)))
        return self.head(out.squeeze(1)), h.squeeze(0), c.squeeze(0)


def lstm_policy():
    """An LSTM policy in torchrl's recurrent convention: observation [48], recurrent_state_h/c
    [128], is_init [1] -> action [12], next.recurrent_state_h/c [128]."""
    torch.manual_seed(0)
    policy = TensorDictModule(
        _LSTMStep(),
        in_keys=["observation", "recurrent_state_h", "recurrent_state_c", "is_init"],
        out_keys=["action", ("next", "recurrent_state_h"), ("next", "recurrent_state_c")],
    )
    example = TensorDict(
        {
            "observation": torch.randn(EXAMPLE_BATCH, 48),
            "recurrent_state_h": torch.randn(EXAMPLE_BATCH, 128),
            "recurrent_state_c": torch.randn(EXAMPLE_BATCH, 128),
            "is_init": torch.zeros(EXAMPLE_BATCH, 1, dtype=torch.bool),
        },
        batch_size=[EXAMPLE_BATCH],
    )
    return policy, example


POLICIES = {
    "tutorial": tutorial_policy,
    "mlp": mlp_actor,
    "conv": conv_actor,
    "lstm": lstm_policy,
    "nature": nature_actor,
    "impala": impala_actor,
    "heightmap": heightmap_actor,
    "wide_mlp": wide_mlp_actor,
}

# The batch sizes make bench times; the pixel networks at 1 and 64 only (their 4096 would hold
# gigabytes of activations per call).
BATCHES = (1, 64, 256, 4096)
PIXEL_BATCHES = {"nature": (1, 64), "impala": (1, 64)}


def timed_batches(policy: str) -> tuple[int, ...]:
    return PIXEL_BATCHES.get(policy, BATCHES)


DESCRIPTIONS = {
    "tutorial": "tensordict export tutorial: obs [3] -> 64 -> Normal(loc, scale) [2], deterministic",
    "mlp": "MLP actor: obs [48] -> 256 -> 256 -> action [12], ELU",
    "conv": "ConvNet actor: uint8 pixels [3,64,64] -> 3 convs -> 256 -> action [12]",
    "lstm": "LSTM policy: nn.LSTM(48, 128) one step + Linear -> action [12], (h, c) in and out",
    "nature": "Nature CNN (DQN): uint8 frames [4,84,84] -> 3 convs -> 512 -> action [6]",
    "impala": "IMPALA ResNet: uint8 pixels [3,64,64] -> 3 stages (conv, max pool, 2 residual blocks) "
    "-> 256 -> action [15]",
    "heightmap": "height-map encoder: height_map [1,32,32] -> 3 convs -> 128, with obs [48] -> 256 -> 128 "
    "-> action [12], ELU",
    "wide_mlp": "wide MLP: obs [96] -> 1024 -> 1024 -> action [24], SiLU",
}
