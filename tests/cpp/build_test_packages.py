"""Builds the packages the C++ tests load (a ctest fixture), through the `tdaot build` CLI with
batch 1..64 and the default tuning ("auto": a throughput model plus a batch-1 latency model):
tutorial, nested and recurrent.pt2, custom_op.pt2 calling
tdaot_test::scale_clamp (its library comes from $TDAOT_TEST_OPS_LIB), tutorial_b14.pt2 with
latency models for batches 1 and 4, tutorial_throughput.pt2 with the throughput model alone, and
legged.pt2 with the deployment contract of examples/policies.py:legged_contract (--contract).

Usage: build_test_packages.py OUTDIR.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POLICIES = ROOT / "examples" / "policies.py"
PACKAGES = {
    "tutorial": (f"{POLICIES}:tutorial_policy",),
    "nested": (f"{POLICIES}:nested_policy",),
    "recurrent": (f"{POLICIES}:recurrent_policy",),
    "custom_op": (f"{ROOT / 'tests' / 'ops' / 'scale_clamp.py'}:scale_clamp_policy",),
    "tutorial_b14": (f"{POLICIES}:tutorial_policy", "--specialize", "1,4"),
    "tutorial_throughput": (f"{POLICIES}:tutorial_policy", "--tuning", "throughput"),
    "legged": (f"{POLICIES}:legged_policy", "--contract", f"{POLICIES}:legged_contract"),
}


def main(outdir: str) -> int:
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    for name, (factory, *options) in PACKAGES.items():
        command = [
            sys.executable,
            "-m",
            "tdaot",
            "build",
            factory,
            "-o",
            str(out / f"{name}.pt2"),
            "--batch",
            "1:64",
            *options,
        ]
        if subprocess.run(command, cwd=ROOT).returncode != 0:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
