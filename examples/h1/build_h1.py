"""The Unitree H1 walking policy as a user would deploy it with tdaot: the trained TorchScript
module of unitree_rl_gym (``motion.pt``, in ``../shared/robots/unitree_h1``; not part of this
repository) turned into a torchrl ``LSTMModule`` + MLP ``TensorDictSequential``, checked equal to
the TorchScript module, given a contract that says what each of its 41 observations is and how its
10 actions drive the joints (gains included), and built into a package with a batch-1 lite model::

    python examples/h1/build_h1.py --h1 ../shared/robots/unitree_h1 --output dist/h1_walk.pt2
    tdaot rehearse dist/h1_walk.pt2 --mjcf ../shared/robots/unitree_h1/scene.xml --reference

(``--reference`` finds the eager policy through :func:`factory`, which the package records.)

Every number of the contract is one of the robot's facts (its README and h1.yaml): observation
scales 0.25 (angular velocity), 2, 2, 0.25 (command), 1 (joint positions about the default
angles), 0.05 (joint velocities); action scale 0.25 about the default angles; PD gains kp, kd;
50 Hz control. Nothing of the TorchScript module's code is kept: only its weights.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.modules import MLP, LSTMModule

import tdaot
from tdaot.trained.mjcf import mjcf_joint_ranges

OBSERVATIONS = 41
HIDDEN = 64
LEG = ("hip_yaw", "hip_roll", "hip_pitch", "knee", "ankle")
JOINTS = tuple(f"{side}_{joint}_joint" for side in ("left", "right") for joint in LEG)
DEFAULT_ANGLES = (0.0, 0.0, -0.1, 0.3, -0.2) * 2
KP = (150.0, 150.0, 150.0, 200.0, 40.0) * 2
KD = (2.0, 2.0, 2.0, 4.0, 2.0) * 2
ACTION_SCALE = 0.25
CONTROL_DT = 0.02
GAIT_PERIOD = 0.8
# The supervisor of the joint targets (docs/contract.md, "Supervisor"): a 0.1 s soft start from
# the pose the robot is in (short: a target at a crouch's measured pose holds no weight), each
# joint's spring torque at most MAX_TORQUE N m (standing and walking peak near 70: the cap bites in a
# handover's recovery), the MJCF's joint ranges as limits, and the damp fallback when a joint
# moves faster than MAX_JOINT_VELOCITY rad/s (walking at 0.5 m/s peaks near 6.4 rad/s) or the
# pelvis tilts more than MAX_TILT rad.
BLEND_SECONDS = 0.1
MAX_TORQUE = 100.0
MAX_JOINT_VELOCITY = 10.0
MAX_TILT = 0.8


def torchrl_policy(scripted: torch.jit.ScriptModule) -> TensorDictSequential:
    """torchrl's LSTMModule (41 -> 64, single step) and an MLP head (64 -> 32, ELU, -> 10) with
    the TorchScript module's weights.

    inputs  observation [41], recurrent_state_h/_c [1, 64], is_init [1]
    outputs embed [64], action [10], next.recurrent_state_h/_c [1, 64]
    """
    rnn = LSTMModule(input_size=OBSERVATIONS, hidden_size=HIDDEN, in_key="observation", out_key="embed")
    head = TensorDictModule(
        MLP(in_features=HIDDEN, out_features=len(JOINTS), num_cells=[32], activation_class=nn.ELU),
        in_keys=["embed"],
        out_keys=["action"],
    )
    weights = dict(scripted.named_parameters())
    with torch.no_grad():
        for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
            getattr(rnn.lstm, name).copy_(weights[f"memory.{name}"])
        linears = [m for m in head.module if isinstance(m, nn.Linear)]
        assert len(linears) == 2 and isinstance(head.module[1], nn.ELU), head.module
        for linear, index in zip(linears, (0, 2)):
            linear.weight.copy_(weights[f"actor.{index}.weight"])
            linear.bias.copy_(weights[f"actor.{index}.bias"])
    return TensorDictSequential(rnn, head).eval()


def factory() -> tuple[TensorDictSequential, TensorDict]:
    """The package's factory (``tdaot rehearse --reference`` rebuilds the eager policy with it):
    the torchrl policy of ``$TDAOT_H1_DIR/motion.pt`` (default ../shared/robots/unitree_h1)."""
    h1 = os.environ.get("TDAOT_H1_DIR", "../shared/robots/unitree_h1")
    return torchrl_policy(torch.jit.load(os.path.join(h1, "motion.pt")).eval()), example_input()


def example_input() -> TensorDict:
    """One control step's inputs at batch 1 (zero state, first step)."""
    return TensorDict(
        {
            "observation": torch.zeros(1, OBSERVATIONS),
            "recurrent_state_h": torch.zeros(1, 1, HIDDEN),
            "recurrent_state_c": torch.zeros(1, 1, HIDDEN),
            "is_init": torch.ones(1, 1, dtype=torch.bool),
        },
        batch_size=[1],
    )


def check_equal(scripted: torch.jit.ScriptModule, policy: TensorDictSequential, steps: int) -> float:
    """Steps both over `steps` observations (the TorchScript module carries its state in its
    buffers, the torchrl one in the tensordict) and returns the largest action difference."""
    torch.manual_seed(0)
    scripted.hidden_state.zero_()
    scripted.cell_state.zero_()
    td = example_input()
    worst = 0.0
    with torch.no_grad():
        for step in range(steps):
            obs = torch.randn(1, OBSERVATIONS) * (1.0 + 0.5 * torch.sin(torch.tensor(step / 20.0)))
            td["observation"] = obs
            out = policy(td.clone())
            expected = scripted(obs)
            worst = max(worst, (out["action"] - expected).abs().max().item())
            td["recurrent_state_h"] = out["next", "recurrent_state_h"]
            td["recurrent_state_c"] = out["next", "recurrent_state_c"]
            td["is_init"] = torch.zeros(1, 1, dtype=torch.bool)
    scripted.hidden_state.zero_()
    scripted.cell_state.zero_()
    return worst


def contract(mjcf: str | None = None) -> tdaot.Contract:
    """The 41 observations as terms (scaled as the policy was trained), the 10 joint targets
    with their PD gains, and their supervisor (with ``mjcf``, the robot's h1.xml, its joint
    ranges as the limits)."""
    observation = tdaot.Signal(
        terms=[
            tdaot.Term("base_ang_vel", scale=0.25),
            tdaot.Term("projected_gravity"),
            tdaot.Term("velocity_commands", scale=(2.0, 2.0, 0.25)),
            tdaot.Term("joint_pos_rel", output="action"),
            tdaot.Term("joint_vel_rel", scale=0.05, output="action"),
            tdaot.Term("last_action", output="action"),
            tdaot.Term("gait_phase", period=GAIT_PERIOD),
        ]
    )
    action = tdaot.Signal(names=JOINTS, scale=ACTION_SCALE, offset=DEFAULT_ANGLES, stiffness=KP, damping=KD)
    ranges = mjcf_joint_ranges(mjcf, JOINTS) if mjcf is not None else None
    supervisor = tdaot.Supervisor(
        blend_seconds=BLEND_SECONDS,
        max_velocity=MAX_JOINT_VELOCITY,
        max_torque=MAX_TORQUE,
        max_tilt=MAX_TILT,
        fallback="damp",
        **({"low": ranges[0], "high": ranges[1]} if ranges is not None else {}),
    )
    return tdaot.Contract(
        control_dt=CONTROL_DT,
        inputs={"observation": observation},
        outputs={"action": action},
        metadata={"robot": "unitree_h1", "policy": "unitree_rl_gym motion.pt (276801e)"},
        supervisor=supervisor,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--h1", default="../shared/robots/unitree_h1", help="folder holding motion.pt")
    parser.add_argument("--output", default="dist/h1_walk.pt2", help="the package to write")
    parser.add_argument("--steps", type=int, default=300, help="steps of the equality check")
    parser.add_argument("--tdaot-lite", default="build/cpp/tdaot-lite", help="inspects the package")
    parser.add_argument("--check-only", action="store_true", help="the equality check, no build")
    args = parser.parse_args(argv)

    motion = os.path.join(args.h1, "motion.pt")
    if not os.path.isfile(motion):
        print(f"{motion} is absent: the H1 policy is not part of this repository", file=sys.stderr)
        return 2
    scripted = torch.jit.load(motion).eval()
    policy = torchrl_policy(scripted)
    worst = check_equal(scripted, policy, args.steps)
    print(f"torchrl LSTMModule + MLP vs motion.pt, {args.steps} steps: largest action difference {worst:.2e}")
    if worst > 1e-5:
        print("the torchrl policy does not match the TorchScript module", file=sys.stderr)
        return 1
    if args.check_only:
        return 0

    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    artifact = tdaot.build(
        policy,
        example_input(),
        args.output,
        batch=1,
        contract=contract(os.path.join(args.h1, "h1.xml")),
        factory="examples/h1/build_h1.py:factory",
    )
    print(f"wrote {artifact.path}")
    if 1 not in {served.min for served in artifact.manifest.lite_batches().values()}:
        print("the package has no batch-1 lite model", file=sys.stderr)
        return 1
    if os.access(args.tdaot_lite, os.X_OK):
        shown = subprocess.run([args.tdaot_lite, "inspect", args.output], capture_output=True, text=True)
        print(shown.stdout, end="")
        if shown.returncode != 0 or "serves batch sizes: 1" not in shown.stdout:
            print(shown.stderr, end="", file=sys.stderr)
            print("tdaot-lite inspect: no batch-1 lite model", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
