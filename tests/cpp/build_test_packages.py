"""Builds the packages the C++ tests load (a ctest fixture), through the `tdaot build` CLI with
batch 1..64 and the default tuning ("auto": a throughput model plus a batch-1 latency model):
tutorial, nested and recurrent.pt2, custom_op.pt2 calling
tdaot_test::scale_clamp (its library comes from $TDAOT_TEST_OPS_LIB), tutorial_b14.pt2 with
latency models for batches 1 and 4, tutorial_throughput.pt2 with the throughput model alone, and
legged.pt2 with the deployment contract of examples/policies.py:legged_contract (--contract).
For the signature tests (no compile): two key pairs, keys/ and other_keys/ (`tdaot keygen`),
tutorial_signed.pt2 (a copy of tutorial.pt2 signed with keys/private.pem by `tdaot sign`) and
message.sig.json, signatures of the bytes "tdaot signature test message" by keys/private.pem.
Then tutorial_v2.tdw, the weight file of a retrained tutorial policy for tutorial.pt2
(tdaot.export_weights), for the weight swap tests, and for the signed swap tests (no compile:
its tensors made for tutorial_signed.pt2) tutorial_signed_v2.tdw signed with keys/private.pem
by `tdaot sign`, tutorial_signed_v2_unsigned.tdw, tutorial_signed_v2_other.tdw signed with
other_keys/private.pem, and tutorial_signed_v2_forged.tdw: one tensor changed and its digests
recomputed under the signature of tutorial_signed_v2.tdw.

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
    if sign_packages(out) != 0:
        return 1
    write_weight_file(out)
    return write_signed_weight_files(out)


def write_weight_file(out: Path) -> int:
    """tutorial_v2.tdw: the tutorial policy with every weight changed, for tutorial.pt2."""
    import torch

    import tdaot

    sys.path.insert(0, str(ROOT))
    from examples.policies import tutorial_policy

    policy, _ = tutorial_policy()
    with torch.no_grad():
        for parameter in policy.parameters():
            parameter.mul_(-1.5).add_(0.25)
    tdaot.export_weights(policy, out / "tutorial.pt2", out / "tutorial_v2.tdw")
    return 0


def write_signed_weight_files(out: Path) -> int:
    """tutorial_v2.tdw's tensors made for tutorial_signed.pt2: signed, unsigned, signed by the
    other key, and forged (see the module's docstring)."""
    import safetensors.torch
    import torch

    from tdaot.builder.pipeline import file_sha256
    from tdaot.builder.weights_format import read_signatures, write_signatures, write_weight_file

    def write(name: str, tensors: dict) -> Path:
        weights = {k.removeprefix("weights/"): v for k, v in tensors.items() if k.startswith("weights/")}
        models: dict = {}
        for key, value in tensors.items():
            if key.startswith("model/"):
                _, model, constant = key.split("/", 2)
                models.setdefault(model, {})[constant] = value
        write_weight_file(out / name, weights, models, file_sha256(out / "tutorial_signed.pt2"))
        return out / name

    tensors = safetensors.torch.load_file(out / "tutorial_v2.tdw")
    for name, key in [("tutorial_signed_v2", "keys"), ("tutorial_signed_v2_other", "other_keys")]:
        path = write(f"{name}.tdw", tensors)
        command = [sys.executable, "-m", "tdaot", "sign", str(path), "--key", str(out / key / "private.pem")]
        if subprocess.run(command, cwd=ROOT).returncode != 0:
            return 1
    write("tutorial_signed_v2_unsigned.tdw", tensors)
    first = sorted(tensors)[0]
    forged = write("tutorial_signed_v2_forged.tdw", {**tensors, first: torch.zeros_like(tensors[first])})
    signatures = json.loads(read_signatures(out / "tutorial_signed_v2.tdw"))
    write_signatures(forged, forged, signatures)
    return 0


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
