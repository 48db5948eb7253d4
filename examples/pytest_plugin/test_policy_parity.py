"""A parity suite with tdaot's pytest plugin: `pytest examples/pytest_plugin --tdaot-runtime=lite`."""

import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn


def test_policy_runs_natively(tdaot_package, tdaot_parity):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 2))
    policy = TensorDictModule(net, in_keys=["observation"], out_keys=["action"])
    example = TensorDict({"observation": torch.randn(4, 6)}, batch_size=[4])
    tdaot_parity(policy, tdaot_package(policy, example), example)
