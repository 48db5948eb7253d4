"""tdaot.from_leapp, `tdaot build --leapp` and `tdaot inspect --leapp`: NVIDIA LEAPP bundles in and out.

The bundle is traced here by leapp 0.7.2 itself (in a subprocess: leapp patches torch while it
traces) from a small policy pipeline: joint positions and velocities and a velocity command in,
joint position targets out with constant kp / kd, the action fed back as ``last_action``, 50 Hz.
The policy is compared with leapp's own InferenceManager over steps with a reset; one package
is built through the command line, run natively and on the lite runtime, and written back as a
LEAPP YAML.
"""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap

import pytest
import torch
import yaml
from leapp import InferenceManager

import tdaot
from tdaot.cli import main
from tdaot.trained.leapp import from_leapp, leapp_contract

JOINTS = ("hip", "knee", "ankle")
TOL = 1e-5

_TRACE = """
import torch, leapp
from leapp import annotate, TensorSemantics, InputKindEnum, OutputKindEnum, GraphConfigs
torch.manual_seed(0)
J = ["hip", "knee", "ankle"]
net = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ELU(), torch.nn.Linear(16, 3))
default = torch.tensor([0.1, -0.2, 0.3])
leapp.start(name="tiny", save_path=SAVE)
for step in range(3):
    pos, vel, cmd = torch.randn(1, 3), torch.randn(1, 3), torch.randn(1, 3)
    p, v, c = annotate.input_tensors("policy", [
        TensorSemantics(name="joint_pos", ref=pos, kind=InputKindEnum.JOINT_POSITION, element_names=J),
        TensorSemantics(name="joint_vel", ref=vel, kind=InputKindEnum.JOINT_VELOCITY, element_names=J),
        TensorSemantics(name="command", ref=cmd, kind=InputKindEnum.COMMAND_BODY_VELOCITY,
                        element_names=["vx", "vy", "wz"]),
    ])
    last = annotate.state_tensors("policy", {"last_action": torch.full((1, 3), 0.5)})
    a = net(torch.cat([p - default, v * 0.05, c, last], -1))
    annotate.update_state("policy", {"last_action": a})
    annotate.output_tensors("policy", [
        TensorSemantics(name="joint_targets", ref=default + 0.25 * a, kind=OutputKindEnum.JOINT_POSITION,
                        element_names=J),
    ], static_outputs=[
        TensorSemantics(name="kp", ref=torch.tensor([[20.0, 30.0, 40.0]]), kind=OutputKindEnum.KP,
                        element_names=J),
        TensorSemantics(name="kd", ref=torch.tensor([[0.5, 0.6, 0.7]]), kind=OutputKindEnum.KD,
                        element_names=J),
    ], export_with="pt2")
leapp.stop()
leapp.compile_graph(visualize=False, graph_configs=GraphConfigs(frequency=50.0))
"""


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """The YAML of a bundle leapp traced and exported (pt2 backend)."""
    root = tmp_path_factory.mktemp("leapp")
    script = f"SAVE = {str(root)!r}\n" + textwrap.dedent(_TRACE)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    path = root / "tiny" / "tiny.yaml"
    assert path.is_file() and (root / "tiny" / "policy.pt2").is_file()
    return path


def _observations(generator):
    return {k: torch.randn(1, 3, generator=generator) for k in ("joint_pos", "joint_vel", "command")}


def _rollout(step, path, steps: int = 7, reset_at: int = 4) -> float:
    """``step(observations, reset) -> joint targets`` against leapp's own InferenceManager, which
    carries the feedback itself; both reset (to the initial value 0.5) before step ``reset_at``."""
    reference = InferenceManager(str(path))
    generator = torch.Generator().manual_seed(2)
    worst = 0.0
    for index in range(steps):
        obs = _observations(generator)
        if index == reset_at:
            reference.reset()
        expected = reference({f"policy/{k}": v for k, v in obs.items()})["policy/joint_targets"]
        got = step(obs, index in (0, reset_at))
        worst = max(worst, (got - expected).abs().max().item())
    return worst


def test_the_policy_matches_leapps_inference_manager(bundle):
    policy, example = tdaot.from_leapp(bundle)
    assert policy.in_keys == ["joint_pos", "joint_vel", "command", "last_action", "is_init"]
    assert policy.out_keys == ["joint_targets", ("next", "last_action"), "kp", "kd"]
    assert example.batch_size == torch.Size([1]) and example["is_init"].all()
    td = example.clone()

    def step(obs, reset):
        td.update(obs)
        td["is_init"] = torch.full((1, 1), reset)
        out = policy(td.clone())
        td["last_action"] = out["next", "last_action"]
        return out["joint_targets"]

    assert _rollout(step, bundle) <= TOL


def test_the_yaml_becomes_the_contract(bundle):
    policy, _ = from_leapp(bundle)
    contract = leapp_contract(policy.bundle, policy)
    assert contract.control_dt == pytest.approx(0.02)
    assert contract.inputs["joint_pos"].names == JOINTS and contract.inputs["command"].names == (
        "vx",
        "vy",
        "wz",
    )
    target = contract.outputs["joint_targets"]
    assert (
        target.names == JOINTS
        and target.stiffness == (20.0, 30.0, 40.0)
        and target.damping == (0.5, 0.6, 0.7)
    )
    assert contract.metadata["leapp.kind.joint_vel"] == "state/joint/velocity"
    assert contract.metadata["leapp.kind.joint_targets"] == "target/joint/position"
    assert "last_action" not in contract.inputs  # the feedback is recurrent state, not a signal
    assert leapp_contract(policy.bundle, policy, control_dt=0.01).control_dt == 0.01


def _edited(bundle, tmp_path, edit):
    data = yaml.safe_load(bundle.read_text())
    edit(data)
    for name in ("policy.pt2", "tiny_initial_values.safetensors"):
        (tmp_path / name).write_bytes((bundle.parent / name).read_bytes())
    path = tmp_path / "edited.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _second_node(data):
    data["models"]["critic"] = copy.deepcopy(data["models"]["policy"])


def _input(index, **fields):
    return lambda d: d["models"]["policy"]["inputs"][index].update(fields)


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (_second_node, r"is a pipeline of 2 nodes \('critic', 'policy'\); tdaot carries one node"),
        (lambda d: d["models"]["policy"]["parameters"].update(backend="onnx"), r"backend is 'onnx'.*pt2"),
        (lambda d: d["models"]["policy"]["parameters"].update(sha256sum="0" * 64),
         r"has sha256 [0-9a-f]{64}, but"),
        (lambda d: d["pipeline"].update(data_flow={"a/x": ["b/y"]}), r"pipeline.data_flow is .*no data flow"),
        (_input(0, kind="state/joint/temperature"),
         r"inputs\[0\] \(joint_pos\) kind is 'state/joint/temperature'"),
        (_input(1, element_names=[["a", "b"]]), r"inputs\[1\] \(joint_vel\) element_names has 2 names"),
        (_input(2, element_names=["__temporal_axis__", ["x", "y", "z"]]), r"not temporal or per-axis names"),
        (_input(0, shape=[1, 2, 3]), r"shape is \[1, 2, 3\]: tdaot carries \[batch, n\]"),
        (lambda d: d["pipeline"].update(feedback_flow={"policy/kp": ["policy/command"]}), r"the same name"),
        (lambda d: d["models"]["policy"]["parameters"].update(model_path="gone.pt2"),
         r"gone.pt2' does not exist"),
    ],
)  # fmt: skip
def test_what_tdaot_cannot_carry_is_refused_by_name(bundle, tmp_path, edit, match):
    with pytest.raises(tdaot.InvalidArgumentError, match=match):
        from_leapp(_edited(bundle, tmp_path, edit))


def test_contract_refusals(bundle, tmp_path):
    policy, _ = from_leapp(_edited(bundle, tmp_path, lambda d: d["pipeline"].pop("configs")))
    with pytest.raises(
        tdaot.InvalidArgumentError, match=r"no pipeline.configs.frequency: the contract's control"
    ):
        leapp_contract(policy.bundle, policy)

    def untarget(data):
        data["models"]["policy"]["outputs"][0]["kind"] = "target/body/position"

    policy, _ = from_leapp(_edited(bundle, tmp_path, untarget))
    with pytest.raises(tdaot.InvalidArgumentError, match=r"kp/kd outputs but no target/joint/\* output"):
        leapp_contract(policy.bundle, policy)


# --- one package: `tdaot build --leapp`, `tdaot inspect --leapp` ----------------------------
@pytest.fixture(scope="module")
def built(bundle, tmp_path_factory):
    out = tmp_path_factory.mktemp("leapp_cli") / "leapp.pt2"
    assert main(["build", "--leapp", str(bundle), "-o", str(out)]) == 0
    return out


def test_the_package_runs_as_leapp_does(built, bundle):
    manifest = tdaot.read_manifest(built)
    assert manifest.batch.min == manifest.batch.max == 1  # LEAPP traces batch 1
    assert manifest.recurrent is not None and manifest.contract.control_dt == pytest.approx(0.02)
    session = tdaot.load(str(built)).session(batch=1)

    def step(obs, reset):
        if reset:
            session.reset(torch.ones(1, dtype=torch.bool))
        return session.step(obs)["joint_targets"]

    assert _rollout(step, bundle) <= TOL
    policy, example = from_leapp(bundle)
    generator = torch.Generator().manual_seed(5)
    example.update(_observations(generator))
    example["last_action"] = torch.randn(1, 3, generator=generator)
    example["is_init"] = torch.zeros(1, 1, dtype=torch.bool)
    tdaot.testing.assert_parity(policy, str(built), example, atol=TOL, rtol=0)
    tdaot.testing.assert_parity(policy, str(built), example, runtime="lite", atol=TOL, rtol=0)


def test_inspect_writes_the_contract_as_leapp_yaml(built, bundle, capsys):
    assert main(["inspect", str(built), "--leapp"]) == 0
    written = yaml.safe_load(capsys.readouterr().out)
    original = yaml.safe_load(bundle.read_text())
    node, source = written["models"]["policy"], original["models"]["policy"]
    semantic = ("name", "dtype", "shape", "kind", "element_names")
    for section in ("inputs", "outputs"):
        assert [{k: e.get(k) for k in semantic} for e in node[section]] == [
            {k: e.get(k) for k in semantic} for e in source[section]
        ]
    gains = {e["name"]: e["value"] for e in node["outputs"] if e.get("kind") in ("kp", "kd")}
    assert gains == {"kp": [20.0, 30.0, 40.0], "kd": [0.5, 0.6, 0.7]}
    assert node["parameters"]["backend"] == "tdaot" and node["parameters"]["model_path"] == built.name
    for key in ("feedback_flow", "inputs", "outputs", "data_flow"):
        assert written["pipeline"][key] == original["pipeline"][key], key
    assert written["pipeline"]["configs"]["frequency"] == pytest.approx(50.0)


def test_command_line_misuse(bundle, tmp_path, capsys):
    out = str(tmp_path / "x.pt2")
    assert main(["build", "--leapp", str(bundle), "--mjcf", "robot.xml", "-o", out]) == 2
    assert "--mjcf belongs to --rsl-rl and --run builds, not --leapp" in capsys.readouterr().err
    assert main(["build", "--leapp", str(bundle)]) == 2
    assert "--leapp BUNDLE needs -o OUTPUT.pt2" in capsys.readouterr().err
    assert main(["build", "--leapp", str(bundle), "factory.py:f", "-o", out]) == 2
    assert "give either a factory or --leapp BUNDLE, not both" in capsys.readouterr().err
