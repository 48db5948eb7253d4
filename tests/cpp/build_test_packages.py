"""Builds the packages the C++ tests load (a ctest fixture): tutorial, nested and recurrent.pt2.

Usage: build_test_packages.py OUTDIR. Goes through the `tdaot build` CLI, batch 1..64.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "tutorial": "tutorial_policy",
    "nested": "nested_policy",
    "recurrent": "recurrent_policy",
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
            f"{ROOT / 'examples' / 'policies.py'}:{factory}",
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
