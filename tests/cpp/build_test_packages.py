"""Builds the packages the C++ tests load (a ctest fixture): tutorial, nested, recurrent.pt2, and
custom_op.pt2 calling tdaot_test::scale_clamp (its library comes from $TDAOT_TEST_OPS_LIB).

Usage: build_test_packages.py OUTDIR. Goes through the `tdaot build` CLI, batch 1..64.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POLICIES = ROOT / "examples" / "policies.py"
PACKAGES = {
    "tutorial": f"{POLICIES}:tutorial_policy",
    "nested": f"{POLICIES}:nested_policy",
    "recurrent": f"{POLICIES}:recurrent_policy",
    "custom_op": f"{ROOT / 'tests' / 'ops' / 'scale_clamp.py'}:scale_clamp_policy",
}


def main(outdir: str) -> int:
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    for name, factory in PACKAGES.items():
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
        ]
        if subprocess.run(command, cwd=ROOT).returncode != 0:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
