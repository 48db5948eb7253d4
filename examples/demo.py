"""`make demo`: build the tutorial policy, check parity, run it natively and time it; then a
legged locomotion policy with its deployment contract, stepped inside the safety envelope."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples.policies import LEGGED_JOINTS, legged_contract, legged_policy, tutorial_policy  # noqa: E402

import tdaot  # noqa: E402


def python_latency(call, iters: int) -> tuple[float, float]:
    """p50 and p99 in microseconds of ``call()``."""
    for _ in range(200):
        call()
    samples = []
    for _ in range(iters):
        start = time.perf_counter_ns()
        call()
        samples.append(time.perf_counter_ns() - start)
    samples.sort()
    return samples[len(samples) // 2] / 1e3, samples[int(len(samples) * 0.99)] / 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", default="dist/tutorial.pt2")
    parser.add_argument("--legged-output", default="dist/legged.pt2")
    parser.add_argument("--tdaot-run", default="build/cpp/tdaot-run", help="path of the tdaot-run tool")
    parser.add_argument("--iters", type=int, default=5000)
    args = parser.parse_args()

    print("== build: examples/policies.py:tutorial_policy")
    policy, example = tutorial_policy()
    artifact = tdaot.build(policy, example, args.output, factory="examples/policies.py:tutorial_policy")
    print(f"artifact    {artifact.path}")
    print(f"size        {artifact.size_bytes / 1024:.0f} KiB")
    print(f"build time  {artifact.export_seconds:.1f} s export + {artifact.compile_seconds:.1f} s compile")
    print(artifact.manifest.describe())

    print("\n== parity: eager TensorDictModule vs native artifact")
    report = tdaot.testing.assert_parity(policy, artifact, example, batch_sizes=[1, 7, 256])
    print(report.table())

    print("\n== native run (tdaot-run run)")
    subprocess.run([args.tdaot_run, "run", artifact.path, "--batch", "2", "--random"], check=True)

    print("\n== native latency at batch 1, one intra-op thread")
    print("C++ (tdaot-run bench):")
    bench = [
        args.tdaot_run,
        "bench",
        artifact.path,
        "--batch",
        "1",
        "--iters",
        str(args.iters),
        "--threads",
        "1",
    ]
    subprocess.run(bench, check=True)
    print("C++ bound run (tdaot-run bench --bind):")
    subprocess.run([*bench, "--bind"], check=True)
    torch.set_num_threads(1)
    native = tdaot.load(artifact.path)
    obs = torch.randn(1, 3)
    p50, p99 = python_latency(lambda: native.run_positional(obs), args.iters)
    print(f"Python bindings (run_positional): p50 {p50:.1f} us, p99 {p99:.1f} us")
    bound = native.bind(batch=1)
    bound.inputs["observation"].copy_(obs)
    p50, p99 = python_latency(bound.run, args.iters)
    print(f"Python bound run (native.bind(batch=1).run()): p50 {p50:.1f} us, p99 {p99:.1f} us")
    robot_contract(args)
    return 0


def robot_contract(args) -> None:
    """The legged policy built with its contract: the joint order checked, actions inside the
    joint limits, a NaN observation held and a jump rate limited by the session."""
    print("\n== robot contract: examples/policies.py:legged_policy with legged_contract()")
    policy, example = legged_policy()
    artifact = tdaot.build(
        policy,
        example,
        args.legged_output,
        contract=legged_contract(),
        factory="examples/policies.py:legged_policy",
    )
    subprocess.run([args.tdaot_run, "inspect", artifact.path], check=True)
    report = tdaot.testing.assert_parity(policy, artifact, example, batch_sizes=[1, 7])
    print(f"parity with the eager policy inside the contract's map and clip: {len(report.rows)} checks pass")
    native = tdaot.load(artifact.path)
    robot_joints = sorted(LEGGED_JOINTS)  # a robot that lists its joints alphabetically
    order = native.contract.order("action", robot_joints)
    print(f"robot joint order checked: robot joint i is policy element order[i] = {order}")
    session = native.session(batch=1)
    for name, observation in [
        ("finite", torch.zeros(1, 48)),
        ("NaN in the observation", torch.full((1, 48), float("nan"))),
        ("a jump", torch.full((1, 48), 5.0)),
    ]:
        action = session.step(observation=observation)["action"][0, order]
        print(f"  step ({name}): {robot_joints[0]} = {action[0]:.3f}, interventions {session.interventions}")


if __name__ == "__main__":
    sys.exit(main())
