"""Control flow written the exportable way (torch.cond, scan), the wrong way (.item(),
Python if), and graph inspection (--save-exported, inspect --graph)."""

from __future__ import annotations

import re
import textwrap

import pytest
import torch
from conftest import ROOT
from examples.policies import horizon_policy, safety_policy
from tensordict import TensorDict

import tdaot
from tdaot.cli import main
from tdaot.testing import assert_parity


@pytest.fixture(scope="module")
def safety(tmp_path_factory):
    policy, example = safety_policy()
    # AOTInductor's array-ref interface (the bound run's) does not compile torch.cond in
    # torch 2.13: the batch-1 model is built without it, and says so.
    # Nor does it run on the lite runtime then: a LiteWarning says so.
    with (
        pytest.warns(
            tdaot.SpecialisationWarning, match=r"'b1' .* not be compiled for the allocation-free bound"
        ),
        pytest.warns(tdaot.LiteWarning, match=r"model 'b1' \(batch 1\) .*array-ref build refused"),
    ):
        artifact = tdaot.build(policy, example, tmp_path_factory.mktemp("cond") / "safety.pt2")
    assert [(m.name, m.tuning) for m in artifact.manifest.models] == [
        ("model", "throughput"),
        ("b1", "latency"),
    ]
    return policy, artifact


@pytest.mark.parametrize("scale", [0.5, 10.0], ids=["act-branch", "fallback-branch"])
def test_cond_policy_matches_eager_on_both_branches(safety, scale):
    policy, artifact = safety
    inputs = TensorDict({"observation": torch.linspace(-1, 1, 12).reshape(4, 3) * scale}, batch_size=[4])
    assert artifact.manifest.batch.dynamic
    assert_parity(policy, artifact, inputs)
    action = tdaot.load(artifact.path)(inputs)["action"]
    assert (action == 0).all() == (scale > 3.0)


def test_scan_policy_builds_static_and_matches_eager(tmp_path):
    policy, example = horizon_policy()
    with pytest.warns(tdaot.StaticBatchWarning, match="could not be compiled with a dynamic batch"):
        artifact = tdaot.build(policy, example, tmp_path / "horizon.pt2")
    assert artifact.manifest.batch == tdaot.BatchRange(4, 4)
    assert [(s.key, s.shape) for s in artifact.manifest.outputs] == [("final", (3,)), ("costs", (5,))]
    assert_parity(policy, artifact, example)


WRONG_WAY = textwrap.dedent(
    """
    import torch
    from tensordict import TensorDict
    from tensordict.nn import TensorDictModule
    from torch import nn

    class ItemBranch(nn.Module):
        def forward(self, x):
            limit = x.abs().max().item()
            if limit > 1.0:
                return x / limit
            return x

    def item_branch():
        module = TensorDictModule(ItemBranch(), in_keys=["x"], out_keys=["y"])
        return module, TensorDict({"x": torch.randn(4, 3)}, batch_size=[4])
    """
)


def test_item_in_a_branch_points_at_the_line_and_suggests_cond(tmp_path, capsys):
    factory = tmp_path / "wrong_way.py"
    factory.write_text(WRONG_WAY)
    assert main(["build", f"{factory}:item_branch", "-o", str(tmp_path / "x.pt2")]) == 1
    err = capsys.readouterr().err
    report = err[err.rindex("tdaot build: ") :]
    assert "ExportError: torch.export failed for" in report and "ItemBranch" in report
    assert re.search(rf"in your code: {re.escape(str(factory))}:10: if limit > 1.0:", report), report
    assert "torch.cond(pred, true_fn, false_fn, operands)" in report
    assert not (tmp_path / "x.pt2").exists()


def test_save_exported_and_inspect_graph(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "nested.pt2"
    # --tuning throughput: one model, the one the saved program went into.
    assert main(["build", "examples/policies.py:nested_policy", "-o", str(out), "--batch", "1:8",
                 "--tuning", "throughput", "--save-exported"]) == 0  # fmt: skip
    assert f"exported program: {tmp_path / 'nested.ep.pt2'}" in capsys.readouterr().out
    assert main(["inspect", str(out), "--graph"]) == 0
    graph = capsys.readouterr().out
    assert "class GraphModule(torch.nn.Module)" in graph
    assert "torch.ops.aten.linear.default" in graph and "torch.ops.aten.tanh.default" in graph
    # The saved program is the one compiled: it runs and agrees with the package.
    program = torch.export.load(str(tmp_path / "nested.ep.pt2")).module()
    obs, joints = torch.randn(3, 2, 5), torch.randn(3, 7)
    action, command = program(obs, joints)
    native = tdaot.load(out).run_positional(obs, joints)
    torch.testing.assert_close(action, native[0])
    torch.testing.assert_close(command, native[1])


def test_inspect_graph_without_the_exported_program_says_how(tmp_path, capsys, tutorial):
    assert main(["inspect", tutorial[2].path, "--graph"]) == 2
    err = capsys.readouterr().err
    assert "no exported program" in err and "tutorial.ep.pt2" in err and "--save-exported" in err
    broken = tmp_path / "broken.ep.pt2"
    broken.write_bytes(b"not a program")
    assert main(["inspect", str(broken), "--graph"]) == 2
    assert f"{str(broken)!r} is not a torch.export program" in capsys.readouterr().err
