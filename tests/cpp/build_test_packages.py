"""Builds the packages the C++ tests load (a ctest fixture), through the `tdaot build` CLI with
batch 1..64 and the default tuning ("auto": a throughput model plus a batch-1 latency model):
tutorial, nested and recurrent.pt2, custom_op.pt2 calling
tdaot_test::scale_clamp (its library comes from $TDAOT_TEST_OPS_LIB), tutorial_b14.pt2 with
latency models for batches 1 and 4, and tutorial_throughput.pt2 with the throughput model alone.
For the signature tests (no compile): two key pairs, keys/ and other_keys/ (`tdaot keygen`),
tutorial_signed.pt2 (a copy of tutorial.pt2 signed with keys/private.pem by `tdaot sign`) and
message.sig.json, signatures of the bytes "tdaot signature test message" by keys/private.pem.

Usage: build_test_packages.py OUTDIR.
"""

import json
import shutil
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
    return sign_packages(out)


def sign_packages(out: Path) -> int:
    from tdaot.signing import sign_message

    tdaot = [sys.executable, "-m", "tdaot"]
    for keys in ("keys", "other_keys"):
        shutil.rmtree(out / keys, ignore_errors=True)
        if subprocess.run([*tdaot, "keygen", "--out", str(out / keys)], cwd=ROOT).returncode != 0:
            return 1
    shutil.copyfile(out / "tutorial.pt2", out / "tutorial_signed.pt2")
    command = [*tdaot, "sign", str(out / "tutorial_signed.pt2"), "--key", str(out / "keys" / "private.pem")]
    if subprocess.run(command, cwd=ROOT).returncode != 0:
        return 1
    entry = sign_message(b"tdaot signature test message", out / "keys" / "private.pem")
    (out / "message.sig.json").write_text(json.dumps([entry]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
