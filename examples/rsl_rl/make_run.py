"""A small rsl_rl run directory, made with rsl_rl itself, as Isaac Lab + unitree_rl_lab leave one
for the Unitree H1 of ../shared/robots/unitree_h1 (not part of this repository)::

    RUN_DIR/model_<iter>.pt       rsl_rl's OnPolicyRunner checkpoints (a few PPO iterations)
    RUN_DIR/params/agent.yaml     the runner's configuration (actor, critic, obs_groups, PPO)
    RUN_DIR/params/deploy.yaml    unitree_rl_lab's deployment file: joint_ids_map, gains, terms
    RUN_DIR/params/env.yaml       Isaac Lab's env dump (Python tags): step, actuator armature

The environment is a toy (random observations of the deploy.yaml's 42-element layout, a reward
for small actions): the point is the files, not a policy that walks. Then::

    tdaot build --rsl-rl RUN_DIR --mjcf ../shared/robots/unitree_h1/scene.xml -o dist/h1_rsl_rl.pt2
    tdaot inspect dist/h1_rsl_rl.pt2
    tdaot rehearse dist/h1_rsl_rl.pt2 --mjcf ../shared/robots/unitree_h1/scene.xml --command 0.5,0,0

(``examples/rsl_rl/walkthrough.sh`` runs all four.) The H1's joint order comes from its MJCF:
the SDK order, left leg then right leg; Isaac Lab orders the policy's joints joint type by joint
type, left then right, and ``joint_ids_map`` maps one to the other.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import yaml
from rsl_rl.env import VecEnv
from tensordict import TensorDict

from tdaot.trained.mjcf import mjcf_joint_names

LEG = ("hip_yaw", "hip_roll", "hip_pitch", "knee", "ankle")
# The H1's facts (its h1.yaml), in the SDK order (left leg, then right leg).
KP = {"hip_yaw": 150.0, "hip_roll": 150.0, "hip_pitch": 150.0, "knee": 200.0, "ankle": 40.0}
KD = {"hip_yaw": 2.0, "hip_roll": 2.0, "hip_pitch": 2.0, "knee": 4.0, "ankle": 2.0}
DEFAULT = {"hip_yaw": 0.0, "hip_roll": 0.0, "hip_pitch": -0.1, "knee": 0.3, "ankle": -0.2}
ARMATURE = 0.01  # what the H1's MJCF uses: the rehearsal prints no mismatch
# base_ang_vel x 2 steps, projected_gravity, velocity_commands, joint_pos_rel, joint_vel_rel, last_action
OBSERVATIONS = 3 * 2 + 3 + 3 + 10 + 10 + 10


def policy_joints() -> list[str]:
    """Isaac Lab's order: joint type by joint type, left then right."""
    return [f"{side}_{joint}_joint" for joint in LEG for side in ("left", "right")]


def kind(name: str) -> str:
    return next(joint for joint in LEG if name.endswith(f"_{joint}_joint"))


def deploy_yaml(robot: list[str]) -> dict:
    """unitree_rl_lab's params/deploy.yaml for the H1 (export_deploy_cfg's fields)."""
    policy = policy_joints()
    return {
        "joint_ids_map": [robot.index(name) for name in policy],
        "step_dt": 0.02,
        "stiffness": [KP[kind(name)] for name in robot],  # SDK order
        "damping": [KD[kind(name)] for name in robot],
        "default_joint_pos": [DEFAULT[kind(name)] for name in policy],  # policy order
        "commands": {
            "base_velocity": {
                "ranges": {"lin_vel_x": [-0.5, 1.0], "lin_vel_y": [-0.3, 0.3], "ang_vel_z": [-0.5, 0.5]}
            }
        },
        "actions": {
            "JointPositionAction": {
                "clip": None,
                "joint_names": [".*"],
                "scale": [0.25] * len(policy),
                "offset": [DEFAULT[kind(name)] for name in policy],
            }
        },
        "observations": {
            "base_ang_vel": {"params": {}, "clip": None, "scale": [0.25] * 3, "history_length": 2},
            "projected_gravity": {"params": {}, "clip": None, "scale": [1.0] * 3, "history_length": 1},
            "velocity_commands": {
                "params": {"command_name": "base_velocity"},
                "clip": None,
                "scale": [2.0, 2.0, 0.25],
                "history_length": 1,
            },
            "joint_pos_rel": {"params": {}, "clip": None, "scale": [1.0] * 10, "history_length": 1},
            "joint_vel_rel": {
                "params": {},
                "clip": [-100.0, 100.0],
                "scale": [0.05] * 10,
                "history_length": 1,
            },
            "last_action": {"params": {}, "clip": None, "scale": [1.0] * 10, "history_length": 1},
        },
    }


ENV_YAML = """\
# Isaac Lab's dump of the env config (abridged): PyYAML's full dumper, Python tags included.
sim:
  dt: 0.005
  gravity: !!python/tuple [0.0, 0.0, -9.81]
decimation: 4
scene:
  num_envs: 64
  robot:
    class_type: !!python/name:isaaclab.assets.articulation.articulation.Articulation ''
    init_state:
      pos: !!python/tuple [0.0, 0.0, 1.05]
    actuators:
      legs:
        class_type: !!python/name:isaaclab.actuators.actuator_pd.ImplicitActuator ''
        joint_names_expr: [.*_hip_yaw_joint, .*_hip_roll_joint, .*_hip_pitch_joint, .*_knee_joint]
        armature: {ARMATURE}
      feet:
        class_type: !!python/name:isaaclab.actuators.actuator_pd.ImplicitActuator ''
        joint_names_expr: [.*_ankle_joint]
        armature: {.*_ankle_joint: {ARMATURE}}
actions:
  joint_pos:
    joint_ids: !!python/object/apply:builtins.slice [null, null, null]
"""


def agent_cfg(iterations: int) -> dict:
    """rsl_rl 5.x's runner configuration, as Isaac Lab dumps it to params/agent.yaml."""
    return {
        "seed": 1,
        "num_steps_per_env": 8,
        "max_iterations": iterations,
        "save_interval": 1,
        "experiment_name": "h1_toy",
        "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "actor": {
            "class_name": "MLPModel",
            "hidden_dims": [64, 32],
            "activation": "elu",
            "obs_normalization": True,
            "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0},
        },
        "critic": {
            "class_name": "MLPModel",
            "hidden_dims": [64, 32],
            "activation": "elu",
            "obs_normalization": True,
        },
        "algorithm": {
            "class_name": "PPO",
            "num_learning_epochs": 2,
            "num_mini_batches": 2,
            "learning_rate": 1e-3,
            "schedule": "fixed",
        },
    }


class ToyEnv(VecEnv):
    """rsl_rl's VecEnv interface over random observations of the deploy.yaml's layout; the
    reward prefers small actions (so that a few iterations change the weights)."""

    num_actions = 10
    max_episode_length = 32
    device = "cpu"
    cfg: dict = {}

    def __init__(self, num_envs: int = 64) -> None:
        self.num_envs = num_envs
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.long)
        self.generator = torch.Generator().manual_seed(0)

    def get_observations(self) -> TensorDict:
        policy = torch.randn(self.num_envs, OBSERVATIONS, generator=self.generator) * 0.5
        return TensorDict({"policy": policy}, batch_size=[self.num_envs])

    def step(self, actions: torch.Tensor):
        self.episode_length_buf += 1
        dones = self.episode_length_buf >= self.max_episode_length
        self.episode_length_buf[dones] = 0
        rewards = -(actions**2).mean(dim=-1)
        return self.get_observations(), rewards, dones.float(), {"time_outs": dones.clone(), "log": {}}


def make_run(run_dir: str, mjcf: str, iterations: int) -> str:
    from rsl_rl.runners import OnPolicyRunner

    params = os.path.join(run_dir, "params")
    os.makedirs(params, exist_ok=True)
    robot = mjcf_joint_names(mjcf)
    if sorted(robot) != sorted(policy_joints()):
        raise SystemExit(f"{mjcf}: expected the H1's 10 leg joints, found {robot}")
    cfg = agent_cfg(iterations)
    with open(os.path.join(params, "agent.yaml"), "w") as file:
        yaml.safe_dump(cfg, file, sort_keys=False)
    with open(os.path.join(params, "deploy.yaml"), "w") as file:
        yaml.safe_dump(deploy_yaml(robot), file, default_flow_style=None, sort_keys=False)
    with open(os.path.join(params, "env.yaml"), "w") as file:
        file.write(ENV_YAML.replace("{ARMATURE}", str(ARMATURE)))
    torch.manual_seed(cfg["seed"])
    runner = OnPolicyRunner(ToyEnv(), {**cfg, "logger": "tensorboard"}, log_dir=run_dir, device="cpu")
    runner.learn(num_learning_iterations=iterations)
    return run_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="the run directory to write")
    parser.add_argument("--mjcf", default="../shared/robots/unitree_h1/scene.xml", help="the H1's MJCF")
    parser.add_argument("--iterations", type=int, default=3, help="PPO iterations")
    args = parser.parse_args(argv)
    if not os.path.isfile(args.mjcf):
        print(f"{args.mjcf} is absent: the H1 model is not part of this repository", file=sys.stderr)
        return 2
    make_run(args.run_dir, args.mjcf, args.iterations)
    checkpoints = sorted(name for name in os.listdir(args.run_dir) if name.startswith("model_"))
    print(f"wrote {args.run_dir}: {', '.join(checkpoints)}, params/agent.yaml, deploy.yaml, env.yaml")
    return 0


if __name__ == "__main__":
    sys.exit(main())
