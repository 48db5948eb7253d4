"""Builds the packages the C++ tests load (a ctest fixture) with batch 1..64 and the default
tuning ("auto": a throughput model plus a batch-1 latency model): tutorial, nested and
recurrent.pt2, custom_op.pt2 calling tdaot_test::scale_clamp (its library comes from
$TDAOT_TEST_OPS_LIB), tutorial_b14.pt2 with latency models for batches 1 and 4,
tutorial_throughput.pt2 with the throughput model alone, and legged.pt2 with the deployment
contract of examples/policies.py:legged_contract, and recurrent_b14.pt2 (batch-1 and batch-4
recurrent models, for the lite runtime's reset masks).
In two processes side by side through one artifact cache (emptied when the inputs change), as
`tdaot build` would with the same factory and options: the tutorial variants' models that tutorial.pt2 already
has (its throughput and batch-1 models) are copied, not compiled again (recurrent_b14's likewise).
For the signature tests (no compile): two key pairs, keys/ and other_keys/ (`tdaot keygen`),
tutorial_signed.pt2 (a copy of tutorial.pt2 signed with keys/private.pem by `tdaot sign`) and
message.sig.json, signatures of the bytes "tdaot signature test message" by keys/private.pem.
Then tutorial_v2.tdw, the weight file of a retrained tutorial policy for tutorial.pt2
(tdaot.export_weights), for the weight swap tests, and for the signed swap tests (no compile:
its tensors made for tutorial_signed.pt2) tutorial_signed_v2.tdw signed with keys/private.pem
by `tdaot sign`, tutorial_signed_v2_unsigned.tdw, tutorial_signed_v2_other.tdw signed with
other_keys/private.pem, and tutorial_signed_v2_forged.tdw: one tensor changed and its digest
recomputed under the signature of tutorial_signed_v2.tdw.
Last, lite_expected.json (no compile), what the lite runtime's tests (tests/cpp/lite) compare
with: for a few packages and batch sizes, seeded inputs and the outputs of the full runtime's
bound run (tdaot.runtime, the same compiled model), over a few steps (a recurrent rollout with
resets; a Session with its envelope, NaN and rate limit included), and the eager policy's
outputs where it runs without state.

The pytest suite's fixtures of the same policies build with the same options through this
artifact cache (OUTDIR/cache), so the two suites compile each model once (tests/python/conftest.py).
Built once for both: the script does nothing when OUTDIR/inputs.sha256 matches what the packages are
made from (inputs_digest: tdaot's sources and module, the policies, the op library, this script,
torch and tensordict), and prints how many AOTInductor compiles it ran.

Usage: build_test_packages.py OUTDIR.
"""

import hashlib
import importlib.metadata
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POLICIES = ROOT / "examples" / "policies.py"
# name -> (factory, build options besides batch 1..64); the contract is named, and loaded here.
PACKAGES = {
    "tutorial": (f"{POLICIES}:tutorial_policy", {}),
    "nested": (f"{POLICIES}:nested_policy", {}),
    "recurrent": (f"{POLICIES}:recurrent_policy", {}),
    "custom_op": (f"{ROOT / 'tests' / 'ops' / 'scale_clamp.py'}:scale_clamp_policy", {}),
    "tutorial_b14": (f"{POLICIES}:tutorial_policy", {"specialize": (1, 4)}),
    "tutorial_throughput": (f"{POLICIES}:tutorial_policy", {"tuning": "throughput"}),
    "legged": (f"{POLICIES}:legged_policy", {"contract": f"{POLICIES}:legged_contract"}),
    "recurrent_b14": (f"{POLICIES}:recurrent_policy", {"specialize": (1, 4)}),
}
# OUTDIR's files that say what the packages were built from, and the cache they were built through.
STAMP, CACHE, COMPILES = "inputs.sha256", "cache", "compiles.txt"
DEFAULT_OPS_LIB = ROOT / "build" / "cpp" / "tests" / "ops" / "libtdaot_test_ops.so"
# lite_expected.json's cases: name -> (package, batch, steps, through a Session with its envelope).
LITE_CASES = {
    "tutorial_b1": ("tutorial", 1, 3, False),
    "nested_b1": ("nested", 1, 3, False),
    "tutorial_b14_b4": ("tutorial_b14", 4, 3, False),
    "legged_b1": ("legged", 1, 3, False),
    "recurrent_b14_b4": ("recurrent_b14", 4, 7, False),
    "legged_envelope": ("legged", 1, 6, True),
}


def main(outdir: str) -> int:
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    digest, stamp = inputs_digest(), out / STAMP
    if up_to_date(out):
        return report(out, f"{out} is up to date with its inputs: 0 AOTInductor compiles")
    stamp.unlink(missing_ok=True)
    shutil.rmtree(out / CACHE, ignore_errors=True)  # its entries were built from other inputs
    log = os.environ.setdefault("TDAOT_COMPILE_LOG", str(out / "compiles.log"))
    from tdaot.builder import compile_log

    before = len(compile_log.read(log))
    if build_packages(out) != 0:
        return 1
    if sign_packages(out) != 0:
        return 1
    write_weight_file(out)
    if write_signed_weight_files(out) != 0:
        return 1
    if write_lite_expected(out) != 0:
        return 1
    stamp.write_text(digest)
    return report(out, f"built {out}: {compile_log.summary(compile_log.read(log)[before:])}")


def report(out: Path, line: str) -> int:
    """Prints ``line`` and keeps it in OUTDIR/compiles.txt (make test-cpp prints it after ctest)."""
    print(f"build_test_packages: {line}")
    (out / COMPILES).write_text(line + "\n")
    return 0


def up_to_date(out: Path) -> bool:
    stamp = out / STAMP
    built = all((out / f"{name}.pt2").is_file() for name in PACKAGES)
    return built and stamp.is_file() and stamp.read_text() == inputs_digest()


def inputs_digest() -> str:
    """sha256 of what the packages are made from: tdaot's Python sources and its native module
    (lite_expected.json holds the runtime's outputs), the policies, the custom operator and its
    library, this script, and the torch and tensordict versions."""
    digest = hashlib.sha256()
    sources = [Path(__file__), POLICIES, ROOT / "tests" / "ops" / "scale_clamp.py"]
    sources += sorted((ROOT / "python" / "tdaot").rglob("*.py"))
    native = importlib.util.find_spec("tdaot._C")
    binaries = [Path(os.environ.get("TDAOT_TEST_OPS_LIB") or DEFAULT_OPS_LIB), Path(native.origin)]
    for path in sources + binaries:
        data = path.read_bytes() if path.is_file() else b"absent"
        digest.update(f"{path.name}:{len(data)}:".encode() + data)
    for dist in ("torch", "tensordict"):
        digest.update(f"{dist}=={importlib.metadata.version(dist)};".encode())
    return digest.hexdigest()


def build_options(name: str) -> dict:
    """tdaot.build's keywords for package ``name`` (the factory and the loaded contract included):
    the pytest fixtures of the same policies build with these too, to hit this cache."""
    from tdaot.builder.factories import load_factory

    factory, options = PACKAGES[name]
    if "contract" in options:
        options = {**options, "contract": load_factory(options["contract"])()}
    return {"batch": (1, 64), "factory": factory, **options}


def build_packages(out: Path) -> int:
    """Every package, in two processes side by side (an AOTInductor compile keeps one core busy):
    the packages of one factory stay in one lane, in PACKAGES' order, so a variant copies the
    models its lane built first instead of compiling them again."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    lanes = package_lanes(2)
    # spawn: a forked child would inherit torch's threads and locks in whatever state.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(len(lanes), mp_context=context) as pool:
        return max(pool.map(build_lane, [out] * len(lanes), lanes))


def package_lanes(count: int) -> list[list[str]]:
    """PACKAGES split into ``count`` lanes of whole factories, the most packages first."""
    factories: dict[str, list[str]] = {}
    for name, (factory, _) in PACKAGES.items():
        factories.setdefault(factory, []).append(name)
    lanes: list[list[str]] = [[] for _ in range(count)]
    for names in sorted(factories.values(), key=len, reverse=True):
        min(lanes, key=len).extend(names)
    return [lane for lane in lanes if lane]


def build_lane(out: Path, names: list[str]) -> int:
    import tdaot
    from tdaot.builder.cache import ArtifactCache
    from tdaot.builder.factories import call_factory

    cache = ArtifactCache(out / CACHE)
    for name in names:
        factory, _ = PACKAGES[name]
        module, example = call_factory(factory)
        statuses: list[str] = []
        try:
            artifact = tdaot.build(
                module, example, out / f"{name}.pt2", cache=cache, on_status=statuses.append,
                **build_options(name),
            )  # fmt: skip
        except tdaot.TdaotError as err:
            print(f"build_test_packages: {name}: {type(err).__name__}: {err}", file=sys.stderr)
            return 1
        compiled = [status for status in statuses if status.startswith("compiling")]
        done = f"built {artifact.path} in {artifact.compile_seconds:.1f} s: {compiled or 'cached'}"
        print(done, flush=True)  # two lanes print side by side
    return 0


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

    from tdaot.builder.weights import package_identity
    from tdaot.builder.weights_format import read_signatures, write_signatures, write_weight_file

    def write(name: str, tensors: dict) -> Path:
        weights = {k.removeprefix("weights/"): v for k, v in tensors.items() if k.startswith("weights/")}
        models: dict = {}
        for key, value in tensors.items():
            if key.startswith("model/"):
                _, model, constant = key.split("/", 2)
                models.setdefault(model, {})[constant] = value
        write_weight_file(out / name, weights, models, *package_identity(out / "tutorial_signed.pt2"))
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


def write_lite_expected(out: Path) -> int:
    """lite_expected.json (see the module's docstring): {case: {"package", "batch", "envelope",
    "steps": [{"reset": null | true | [bool per row], "inputs": {key: flat list},
    "outputs": {key: flat list}, "eager": {...} (stateless cases), "interventions": {...}
    (envelope cases)}]}}, lists row-major (null: NaN). A recurrent step gives only the
    non-state inputs."""
    import torch

    from tdaot.builder.export import export_context
    from tdaot.builder.factories import call_factory
    from tdaot.runtime import load
    from tdaot.runtime.inputs import as_tensordict, td_keys
    from tdaot.testing import eager_run

    def flat(tensor: torch.Tensor) -> list:
        # JSON has no NaN: a non-finite value is written as null.
        values = tensor.detach().reshape(-1).tolist()
        return [None if isinstance(v, float) and not math.isfinite(v) else v for v in values]

    cases = {}
    for case, (name, batch, steps, envelope) in LITE_CASES.items():
        native = load(out / f"{name}.pt2")
        manifest = native.manifest
        recurrent = manifest.recurrent
        carried = {p.input for p in recurrent.state} | {recurrent.is_init} if recurrent else set()
        module, _ = call_factory(PACKAGES[name][0])
        generator = torch.Generator().manual_seed(len(cases) + 1)
        runner = native.session(batch) if envelope else native.bind(batch)
        records = []
        for step in range(steps):
            reset = None
            if recurrent and step == 3:
                reset = [row % 2 == 0 for row in range(batch)]
            elif recurrent and step == 5:
                reset = True
            if reset is not None:
                runner.reset(None if reset is True else torch.tensor(reset))
            inputs = {}
            for spec in manifest.inputs:
                if spec.key in carried:
                    continue
                dtype = spec.torch_dtype
                shape = (batch, *spec.shape)
                if dtype.is_floating_point:
                    value = torch.randn(shape, generator=generator, dtype=dtype)
                    if envelope and step == 2:
                        value = value * 20  # outputs move by more than max_delta
                    if envelope and step == 3:
                        value[0, 0] = float("nan")  # the previous outputs come back
                elif dtype == torch.bool:
                    value = torch.randint(0, 2, shape, generator=generator).bool()
                else:
                    value = torch.randint(-5, 6, shape, generator=generator).to(dtype)
                inputs[spec.key] = value
            record = {"reset": reset, "inputs": {k: flat(v) for k, v in inputs.items()}}
            if envelope:
                result = runner.step(inputs)
                record["outputs"] = {
                    s.key: flat(result.get(k))
                    for s, (_, k) in zip(manifest.outputs, td_keys(manifest.output_keys))
                }
                record["interventions"] = dict(runner.interventions)
            else:
                for key, value in inputs.items():
                    runner.inputs[key].copy_(value)
                runner.run()
                record["outputs"] = {k: flat(v) for k, v in runner.outputs.items()}
            if not recurrent and not envelope:
                td = as_tensordict(td_keys(list(inputs)), inputs)
                with export_context(manifest.interaction_type), torch.no_grad():
                    eager = eager_run(module, td, manifest.contract)
                record["eager"] = {s: flat(eager.get(k)) for s, k in td_keys(manifest.output_keys)}
            records.append(record)
        cases[case] = {"package": f"{name}.pt2", "batch": batch, "envelope": envelope, "steps": records}
    (out / "lite_expected.json").write_text(json.dumps(cases, allow_nan=False))
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
