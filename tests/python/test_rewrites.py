"""The export-time module rewrites (tdaot.builder.rewrites): each applies only to the module
type it is written for, never changes the user's module, computes what the module computes
eagerly, lets torch.export keep a dynamic batch, and says so when torchrl's internals changed.

No AOTInductor compile here: the packages and their parity are in test_torchrl_as_they_come.py.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from examples import torchrl_policies as P
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictParams, TensorDictSequential
from torch import nn
from torchrl.envs.transforms import ObservationNorm
from torchrl.modules import GRUModule, MultiAgentConvNet, TanhDelta
from torchrl.modules.models.multiagent import MultiAgentNetBase

import tdaot
from tdaot.builder import rewrites
from tdaot.builder.export import export_context, export_policy
from tdaot.builder.rewrites.torchrl_distributions import tanh_delta_for_export

# factory -> the rewrites it needs, in MODULE_REWRITES order.
NEEDS = {
    "recurrent_policies": ("rnn_single_step",),
    "multi_agent_policy": ("tensordict_params_as_parameters", "agent_loop_for_convolutions"),
    "normalized_policy": ("observation_norm_flag",),
    "actor_critic_families": ("tanh_delta_for_export",),
}


def test_the_rewrites_are_named_once_each():
    names = [rewrite.name for rewrite in rewrites.MODULE_REWRITES]
    assert sorted(names) == sorted({name for needed in NEEDS.values() for name in needed})
    assert all(rewrite.applies_to and rewrite.changes for rewrite in rewrites.MODULE_REWRITES)
    assert "torchrl 0.14.1" in rewrites.CHECKED_AGAINST


def _outputs(policy, example, batch: int) -> TensorDict:
    rows = example[torch.arange(batch) % example.batch_size[0]]
    with export_context("deterministic"), torch.no_grad():
        return policy(rows.clone())


@pytest.mark.parametrize("factory", list(NEEDS))
def test_the_rewritten_copy_computes_what_the_module_computes(factory):
    policy, example = getattr(P, factory)()
    rewritten, applied = rewrites.for_export(policy)
    assert applied == NEEDS[factory] and rewritten is not policy
    for batch in (1, 7):
        expected, actual = _outputs(policy, example, batch), _outputs(rewritten, example, batch)
        for key in policy.out_keys:
            torch.testing.assert_close(actual.get(key), expected.get(key), rtol=1e-6, atol=1e-6)


def _as_it_came(policy: nn.Module) -> list:
    """What the rewrites would change, for each module of ``policy``."""
    return [
        (
            type(m),
            "forward" in vars(m) or "vmap_func_module" in vars(m),
            type(getattr(m, "params", None)),
            getattr(m, "distribution_class", None),
            dict(m.named_buffers(recurse=False)).get("standard_normal"),
        )
        for m in policy.modules()
    ]


@pytest.mark.parametrize("factory", list(NEEDS))
def test_export_keeps_a_dynamic_batch_and_leaves_the_users_module_as_it_came(factory):
    policy, example = getattr(P, factory)()
    before, state = _as_it_came(policy), {k: v.clone() for k, v in policy.state_dict().items()}
    exported = export_policy(policy, example)
    assert exported.batch == tdaot.BatchRange(1, 1 << 20)
    assert exported.rewrites == NEEDS[factory]
    after = _as_it_came(policy)
    assert [row[:4] for row in after] == [row[:4] for row in before]
    assert [row[4] is not None for row in after] == [row[4] is not None for row in before]
    assert policy.state_dict().keys() == state.keys()
    assert all(torch.equal(policy.state_dict()[k], v) for k, v in state.items())


class _MyGRU(GRUModule):
    """A user subclass: its forward may differ, so the GRUModule rewrite leaves it alone."""


def test_a_rewrite_applies_only_to_the_types_it_is_written_for():
    kwargs = {"input_size": 3, "hidden_size": 4, "in_key": "observation", "out_key": "embed"}
    shared_conv = MultiAgentConvNet(
        2, centralized=False, share_params=True, in_features=3, use_td_params=False
    )
    plain = TensorDictModule(nn.GRU(3, 4, batch_first=True), in_keys=["observation"], out_keys=["embed"])
    for policy in (
        TensorDictSequential(_MyGRU(**kwargs)),
        plain,
        TensorDictModule(shared_conv, in_keys=["pixels"], out_keys=["embed"]),
    ):
        assert rewrites.for_export(policy) == (policy, ())


def _rnn_step_changed(monkeypatch):
    monkeypatch.setattr(GRUModule, "_gru", lambda self, input, batch: None)
    return P.gru_policy()[0]


def _agent_vmap_changed(monkeypatch):
    monkeypatch.setattr(MultiAgentNetBase, "vmap_func_module", staticmethod(lambda module, in_dims: None))
    return P.multi_agent_policy(("decentralised",))[0]


def _tanh_delta_changed(monkeypatch):
    monkeypatch.setattr(TanhDelta, "__init__", lambda self, param, low, high: None)
    tanh_delta_for_export.cache_clear()  # the class is made from the patched TanhDelta
    return P.ddpg_actor()


def _params_moved(monkeypatch):
    policy = P.multi_agent_policy(("centralised",))[0]
    del policy[0].module._empty_net  # what a torchrl refactor could do
    return policy


def _flag_reshaped(monkeypatch):
    policy = P.normalized_policy()[0]
    policy[0].standard_normal = torch.tensor([True, True])
    return policy


@pytest.mark.parametrize(
    ("change", "rewrite", "what"),
    [
        (
            _rnn_step_changed,
            "rnn_single_step",
            r"GRUModule._gru takes \(self, input, batch\), not \(self, input",
        ),
        (
            _agent_vmap_changed,
            "agent_loop_for_convolutions",
            r"MultiAgentNetBase.vmap_func_module takes \(module, in_dims\)",
        ),
        (
            _tanh_delta_changed,
            "tanh_delta_for_export",
            r"TanhDelta.__init__ takes \(self, param, low, high\)",
        ),
        (_params_moved, "tensordict_params_as_parameters", r"MultiAgentMLP has no TensorDictParams 'params'"),
        (
            _flag_reshaped,
            "observation_norm_flag",
            r"ObservationNorm.standard_normal is tensor\(\[True, True\]\)",
        ),
    ],
)
def test_changed_torchrl_internals_are_named_with_the_checked_versions(monkeypatch, change, rewrite, what):
    policy = change(monkeypatch)
    message = f"rewrite '{rewrite}' relies on library internals checked against torchrl 0\\.14\\.1.*: {what}"
    try:
        with pytest.raises(tdaot.BuildError, match=message):
            rewrites.for_export(policy)
    finally:
        tanh_delta_for_export.cache_clear()  # made again from torchrl's TanhDelta when next needed


def test_tdaot_rewrites_nothing_and_imports_no_torchrl_when_the_policy_holds_none():
    script = (
        "import sys, torch\n"
        "from tensordict import TensorDict\n"
        "from tensordict.nn import TensorDictModule\n"
        "from tdaot.builder.export import export_policy\n"
        "policy = TensorDictModule(torch.nn.Linear(3, 2), in_keys=['x'], out_keys=['y'])\n"
        "exported = export_policy(policy, TensorDict(x=torch.randn(4, 3), batch_size=[4]))\n"
        "assert exported.rewrites == () and 'torchrl' not in sys.modules, sorted(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True)


def test_observation_norm_flag_keeps_the_flag_value():
    for standard_normal in (True, False):
        norm = ObservationNorm(
            loc=torch.zeros(3), scale=torch.ones(3), in_keys=["x"], standard_normal=standard_normal
        )
        rewritten, _ = rewrites.for_export(TensorDictSequential(norm))
        assert rewritten[0].standard_normal is standard_normal
        assert isinstance(norm.standard_normal, torch.Tensor)  # the user's buffer stays


def test_tensordict_params_become_the_same_parameters():
    policy = P.multi_agent_policy(("decentralised",))[0]
    rewritten, _ = rewrites.for_export(policy)
    assert isinstance(policy[0].module.params, TensorDictParams)
    names = {name for name, _ in rewritten.named_parameters()}
    assert "module.0.module._empty_net.0.weight" in names and not any(".params." in n for n in names)
