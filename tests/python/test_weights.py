"""Weight files (tdaot.export_weights) and the hot weight swap (native.swap_weights): parity
with the retrained policy, rollback, swaps under concurrent calls, and every refusal leaving
the live weights serving."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from types import SimpleNamespace

import pytest
import safetensors.torch
import torch
from conftest import ROOT, retrained_copy
from examples.policies import tutorial_policy
from tensordict import TensorDict

import tdaot
from tdaot import _C, _torch_compat
from tdaot.builder.cache import ArtifactCache
from tdaot.builder.export import export_policy
from tdaot.builder.weights import package_identity
from tdaot.builder.weights_format import (
    FORMAT,
    RECORD_KEY,
    SIGNATURES_KEY,
    canonical_digest,
    program_weights,
    read_metadata,
    signing_payload,
    write_signatures,
    write_weight_file,
)
from tdaot.cli import main
from tdaot.signing import key_id
from tdaot.tools import find

OBSERVATIONS = {
    1: torch.randn(1, 3, generator=torch.Generator().manual_seed(1)),
    8: torch.randn(8, 3, generator=torch.Generator().manual_seed(8)),
}


@pytest.fixture(scope="session")
def retrained(tutorial):
    """The tutorial policy with every weight changed, as training would."""
    return retrained_copy(tutorial[0], seed=3, scale=0.5)


@pytest.fixture(scope="session")
def keys(tmp_path_factory):
    """Two Ed25519 key pairs: private/public and other_private/other_public."""
    from tdaot.signing import keygen

    root = tmp_path_factory.mktemp("weight-keys")
    (private, public), (other_private, other_public) = keygen(root / "a"), keygen(root / "b")
    return SimpleNamespace(
        private=private, public=public, other_private=other_private, other_public=other_public
    )


@pytest.fixture(scope="session")
def weight_file(tutorial, retrained, artifacts_dir, keys):
    """(path, digest) of the retrained policy's weight file for the tutorial package, signed
    with keys.private as it is exported (a package without trusted keys ignores that)."""
    path = artifacts_dir / "tutorial-v2.tdw"
    digest = tdaot.export_weights(retrained, tutorial[2].path, path, sign_key=keys.private)
    return str(path), digest


@pytest.fixture
def native(tutorial):
    """A fresh load per test: swaps change what a loaded policy serves."""
    return tdaot.load(tutorial[2].path)


def outputs(native, batch: int) -> dict[str, torch.Tensor]:
    result = native(observation=OBSERVATIONS[batch])
    return {key: result[key] for key in ("loc", "scale", "sample")}


def eager(policy, batch: int) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        result = policy(TensorDict({"observation": OBSERVATIONS[batch]}, batch_size=[batch]))
    return {key: result[key] for key in ("loc", "scale", "sample")}


def assert_close(actual, expected):
    for key in expected:
        torch.testing.assert_close(actual[key], expected[key], rtol=1e-4, atol=1e-5, msg=key)


def assert_equal(actual, expected):
    for key in expected:
        assert torch.equal(actual[key], expected[key]), key


def test_a_fresh_package_reports_the_digest_export_weights_gives_its_unchanged_policy(tutorial, tmp_path):
    """The digest a fresh package reports (its manifest's weights_sha256) is the one exporting the
    unchanged policy gives: of its weights and every constant of every model. Exported in a
    process that imported only tdaot: the batch-1 model links no libtorch, and torch's container
    runner finds its shim functions only once libtorch's symbols are global, which `import
    tdaot` alone no longer does (no torch)."""
    policy, example, artifact = tutorial
    assert any(model.lite is not None and model.lite.runs for model in artifact.manifest.models)
    script = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import tdaot\n"
        "from examples.policies import tutorial_policy\n"
        "tdaot.export_weights(tutorial_policy()[0], sys.argv[2], sys.argv[3])\n"
    )
    out = tmp_path / "same.tdw"
    done = subprocess.run(
        [sys.executable, "-c", script, str(ROOT), str(artifact.path), str(out)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    exported = read_metadata(out)["tdaot.weights_sha256"]
    native = tdaot.load(artifact.path)
    assert native.weights_sha256 == artifact.manifest.weights_sha256 == exported
    assert native.weights_sha256 == tdaot.verify_weights(str(out))["weights_sha256"]
    # More than the policy's weights: every tensor of the file, the models' constants included.
    weights_only = canonical_digest(program_weights(export_policy(policy, example).program))
    assert exported != weights_only
    assert any(name.startswith("model/b1/") for name in _tensors(str(out)))


def test_swapped_weights_match_the_retrained_policy_on_every_model(native, retrained, weight_file):
    path, digest = weight_file
    binding = native.bind(1)  # bound before the swap: its own model instance must follow it
    native.swap_weights(path)
    assert native.weights_sha256 == digest
    assert_close(outputs(native, 1), eager(retrained, 1))  # the batch-1 latency model
    assert_close(outputs(native, 8), eager(retrained, 8))  # the throughput model
    binding.inputs["observation"].copy_(OBSERVATIONS[1])
    binding.run()
    assert binding.allocation_free
    torch.testing.assert_close(binding.outputs["loc"], eager(retrained, 1)["loc"], rtol=1e-4, atol=1e-5)


def test_the_lite_runtime_swaps_in_the_same_weights(native, tutorial, weight_file, keys):
    """tdaot-lite run --weights (tdaot.testing.lite_runner.run(weights=...)): the lite runtime's
    swap gives the full runtime's batch-1 outputs after the same swap, and refuses what it refuses."""
    from tdaot.testing import lite_runner as lite

    path, _ = weight_file
    native.swap_weights(path)
    steps = {"observation": OBSERVATIONS[1].tolist()}
    result = lite.run(tutorial[2].path, 1, steps, weights=path).outputs[0]
    assert result["loc"] == native(observation=OBSERVATIONS[1])["loc"].tolist()
    with pytest.raises(lite.LiteToolError, match=r"weight file '.*bad.tdw' cannot be opened"):
        lite.run(tutorial[2].path, 1, steps, weights=os.path.join(os.path.dirname(path), "bad.tdw"))
    with pytest.raises(lite.LiteToolError, match="is not signed, but trusted keys are set"):
        lite.run(tutorial[2].path, 1, steps, weights=path, trusted_keys=[keys.public])


def test_rollback_restores_the_old_outputs_exactly(native, weight_file):
    before = {batch: outputs(native, batch) for batch in OBSERVATIONS}
    built_with = native.weights_sha256
    native.swap_weights(weight_file[0])
    native.rollback_weights()
    assert native.weights_sha256 == built_with
    for batch in OBSERVATIONS:
        assert_equal(outputs(native, batch), before[batch])


def test_rollback_without_a_swap_is_refused(native):
    with pytest.raises(tdaot.WeightsError, match="no previous weights"):
        native.rollback_weights()


def test_calls_during_200_swaps_see_old_or_new_weights_never_a_mix(native, weight_file):
    old = {batch: outputs(native, batch) for batch in OBSERVATIONS}
    native.swap_weights(weight_file[0])
    new = {batch: outputs(native, batch) for batch in OBSERVATIONS}
    native.rollback_weights()
    stop, failures, calls = threading.Event(), [], [0]

    def check(batch, got):
        if not (
            all(torch.equal(got[k], old[batch][k]) for k in got)
            or all(torch.equal(got[k], new[batch][k]) for k in got)
        ):
            failures.append((batch, got))

    def caller(batch):
        while not stop.is_set():
            check(batch, outputs(native, batch))
            calls[0] += 1

    def bound_caller():
        binding = native.bind(1)
        binding.inputs["observation"].copy_(OBSERVATIONS[1])
        while not stop.is_set():
            binding.run()
            check(1, {key: binding.outputs[key].clone() for key in ("loc", "scale", "sample")})
            calls[0] += 1

    threads = [threading.Thread(target=caller, args=(b,)) for b in (1, 8, 1)] + [
        threading.Thread(target=bound_caller)
    ]
    for thread in threads:
        thread.start()
    try:
        for i in range(200):
            if i % 2 == 0:
                native.swap_weights(weight_file[0])
            else:
                native.rollback_weights()
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert not failures, f"{len(failures)} of {calls[0]} calls saw neither the old nor the new weights"
    assert calls[0] > 0


def _tensors(path):
    return safetensors.torch.load_file(path)


def _rewrite(tmp_path, weight_file, change, base=None, name="bad.tdw"):
    """A weight file like ``weight_file`` with ``change(tensors)`` applied, its digest recomputed,
    made for ``base`` ((file sha256, manifest sha256)) or for weight_file's package."""
    tensors = _tensors(weight_file[0])
    change(tensors)
    weights = {k[len("weights/") :]: v for k, v in tensors.items() if k.startswith("weights/")}
    models: dict = {}
    for key, value in tensors.items():
        if key.startswith("model/"):
            _, model, constant = key.split("/", 2)
            models.setdefault(model, {})[constant] = value
    metadata = safetensors.safe_open(weight_file[0], "pt").metadata()
    base = base or (metadata["tdaot.base_sha256"], metadata["tdaot.base_manifest_sha256"])
    path = tmp_path / name
    write_weight_file(path, weights, models, *base)
    return str(path)


def _first(tensors, prefix):
    return next(key for key in sorted(tensors) if key.startswith(prefix))


def _reshaped(tensors):
    key = _first(tensors, "model/model/")
    tensors[key] = torch.zeros(tensors[key].numel() + 1)
    return key


def _nan(tensors):
    key = _first(tensors, "model/b1/")
    value = tensors[key].clone()
    value.view(-1)[0] = float("nan")
    tensors[key] = value


REFUSALS = {
    "another architecture": (lambda t: _reshaped(t), "has shape"),
    "wrong dtype": (lambda t: t.__setitem__(k := _first(t, "model/b1/"), t[k].double()), "has dtype"),
    "missing tensor": (lambda t: t.pop(_first(t, "model/b1/")), "is missing"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_refused_tensor_is_named_and_the_old_weights_keep_serving(native, weight_file, tmp_path, case):
    change, message = REFUSALS[case]
    tensors = _tensors(weight_file[0])
    before = {batch: outputs(native, batch) for batch in OBSERVATIONS}
    key = _first(tensors, "model/model/" if case == "another architecture" else "model/b1/")
    path = _rewrite(tmp_path, weight_file, change)
    with pytest.raises(tdaot.WeightsError, match=message) as caught:
        native.swap_weights(path)
    assert path in str(caught.value) and key in str(caught.value) and caught.value.tensor == key
    for batch in OBSERVATIONS:
        assert_equal(outputs(native, batch), before[batch])


def _derived(tensors, prefix):
    """The first floating constant under ``prefix`` that no weights/ entry holds (a prepacked
    GEMM weight of the latency model): the lifted-constant check has no twin to compare it with."""
    weights = [value for key, value in tensors.items() if key.startswith("weights/")]

    def lifted(value: torch.Tensor) -> bool:
        same = (w for w in weights if w.dtype == value.dtype and w.shape == value.shape)
        return any(torch.equal(w, value) for w in same)

    return next(
        key
        for key in sorted(tensors)
        if key.startswith(prefix) and tensors[key].is_floating_point() and not lifted(tensors[key])
    )


def _swapped_by_tdaot_run(package, weights) -> str:
    """The digest ``tdaot-run swap`` reports after swapping ``weights`` into ``package``."""
    done = subprocess.run(
        [find("tdaot-run"), "swap", str(package), str(weights), "--batch", "1"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    after = rf"after swapping in {re.escape(str(weights))}: weights sha256 ([0-9a-f]{{64}})"
    found = re.search(after, done.stdout)
    assert found, done.stdout
    return found.group(1)


def test_a_changed_derived_constant_is_not_reported_as_the_genuine_weights(
    native, tutorial, weight_file, tmp_path
):
    """Issue 56: a copy of a genuine weight file, written with tdaot's own writer, with the same
    weights/ section and one derived constant of the batch-1 model changed by +100. No check
    before the digest's sees it (it swaps in), but the digest the policy then reports covers it:
    a service that pinned the genuine file's digest sees another one, in Python and tdaot-run."""
    genuine, pinned = weight_file
    tensors = _tensors(genuine)
    key = _derived(tensors, "model/b1/")

    def plus_100(t):
        t[key] = t[key] + 100

    changed = _rewrite(tmp_path, weight_file, plus_100, name="derived.tdw")
    assert {k: v for k, v in _tensors(changed).items() if k.startswith("weights/")}.keys() == {
        k for k in tensors if k.startswith("weights/")
    }
    assert all(torch.equal(v, tensors[k]) for k, v in _tensors(changed).items() if k.startswith("weights/"))
    native.swap_weights(changed)  # the lifted-constant check has nothing to compare it with
    reported = native.weights_sha256
    assert reported != pinned
    assert reported == tdaot.verify_weights(changed)["weights_sha256"]
    trusted = tdaot.load(tutorial[2].path)
    trusted.swap_weights(genuine)
    assert trusted.weights_sha256 == pinned
    # What runs differs: the changed constant reaches the batch-1 model.
    assert not torch.equal(outputs(native, 1)["loc"], outputs(trusted, 1)["loc"])
    assert _swapped_by_tdaot_run(tutorial[2].path, genuine) == pinned
    assert _swapped_by_tdaot_run(tutorial[2].path, changed) == reported != pinned


def test_a_file_of_the_first_format_is_refused_by_its_format_name(native, weight_file, tmp_path):
    """tdaot-weights/1's weights digest left the models' constants out: its files are refused by
    name, before any digest is trusted, by the runtime and by signing_payload."""
    data = open(weight_file[0], "rb").read()
    assert data.count(FORMAT.encode()) == 1
    old = tmp_path / "format-1.tdw"
    old.write_bytes(data.replace(FORMAT.encode(), b"tdaot-weights/1"))
    before = outputs(native, 1)
    message = "has format 'tdaot-weights/1', whose weights digest leaves its models' constants out"
    with pytest.raises(tdaot.WeightsError, match=f"weight file '{re.escape(str(old))}' {message}") as caught:
        native.swap_weights(str(old))
    assert caught.value.path == str(old)
    assert_equal(outputs(native, 1), before)
    refused = f"weight file '{re.escape(str(old))}' is a tdaot-weights/1 file"
    with pytest.raises(tdaot.WeightsError, match=refused):
        signing_payload(old)


def test_cache_hits_record_the_weights_digest_and_a_model_not_loadable_here_leaves_it_out(
    tmp_path, monkeypatch
):
    """The digest is computed from the units whether compiled or copied from the cache. Where the
    build cannot load a model to read its constants (another architecture's), the package records
    none, the build says so (WeightSwapWarning naming the package and why), and the package
    reports no digest and refuses every swap naming itself."""
    policy, example = tutorial_policy()
    cache = ArtifactCache(tmp_path / "cache")
    compiled = tdaot.build(policy, example, tmp_path / "a.pt2", tuning="throughput", cache=cache)
    hit = tdaot.build(policy, example, tmp_path / "b.pt2", tuning="throughput", cache=cache)
    assert not compiled.cache_hit and hit.cache_hit
    assert hit.manifest.weights_sha256 == compiled.manifest.weights_sha256
    assert len(hit.manifest.weights_sha256) == 64
    assert tdaot.load(hit.path).weights_sha256 == hit.manifest.weights_sha256

    def unloadable(records):
        raise RuntimeError("Failed to load model: wrong ELF class: ELFCLASS32")

    monkeypatch.setattr(_torch_compat, "compiled_constants", unloadable)
    path = tmp_path / "c.pt2"
    with pytest.warns(
        tdaot.WeightSwapWarning,
        match=rf"package '{re.escape(str(path))}' records no weights digest and cannot swap weights: "
        r"its model 'model' cannot be loaded on this host to read its constants "
        r"\(Failed to load model: wrong ELF",
    ):
        artifact = tdaot.build(policy, example, path, tuning="throughput", cache=cache)
    monkeypatch.undo()
    assert artifact.cache_hit and artifact.manifest.weights_sha256 is None
    assert "weights sha256    none recorded (cannot swap weights)" in artifact.manifest.describe()
    native = tdaot.load(path)
    assert native.weights_sha256 == ""
    weights = tmp_path / "any.tdw"  # refused before it is read: it need not exist
    with pytest.raises(
        tdaot.WeightsError,
        match=rf"weight file '{re.escape(str(weights))}' cannot be swapped into package "
        rf"'{re.escape(str(path))}': its manifest records no weights digest",
    ) as caught:
        native.swap_weights(str(weights))
    assert caught.value.path == str(weights)


def test_refused_files_leave_the_old_weights_serving(native, weight_file, tmp_path):
    before = {batch: outputs(native, batch) for batch in OBSERVATIONS}
    data = open(weight_file[0], "rb").read()
    truncated = tmp_path / "truncated.tdw"
    truncated.write_bytes(data[: len(data) // 2])
    flipped = tmp_path / "flipped.tdw"
    flipped.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    nan = _rewrite(tmp_path, weight_file, _nan, name="nan.tdw")
    other = _rewrite(tmp_path, weight_file, lambda t: None, base=("0" * 64, "1" * 64), name="other.tdw")
    cases = [
        (str(truncated), "truncated"),
        (str(flipped), "does not match its digest"),
        (nan, "not finite"),
        (other, r"was made for the package of sha256 0{64} \(manifest sha256 1{64}\), not for this one"),
    ]
    for path, message in cases:
        with pytest.raises(tdaot.WeightsError, match=message) as caught:
            native.swap_weights(path)
        assert caught.value.path == path and path in str(caught.value)
        for batch in OBSERVATIONS:
            assert_equal(outputs(native, batch), before[batch])
    assert "model/b1/" in str(pytest.raises(tdaot.WeightsError, native.swap_weights, nan).value)


def test_a_path_that_is_not_a_regular_file_is_refused_before_reading(native, tmp_path):
    """Issue 38: a directory, /dev/zero and a FIFO are refused by a WeightsError naming the path,
    before a byte is read (a FIFO without a writer would block the read forever)."""
    import os

    fifo = tmp_path / "fifo.tdw"
    os.mkfifo(fifo)
    for path, message in [
        (str(tmp_path), "is a directory, not a weight file"),
        ("/dev/zero", "is not a regular file"),
        (str(fifo), "is not a regular file"),
    ]:
        with pytest.raises(tdaot.WeightsError, match=message) as caught:
            native.swap_weights(path)
        assert caught.value.path == path and f"weight file '{path}'" in str(caught.value)


def test_export_weights_names_the_first_structural_difference(tutorial, tmp_path):
    policy = copy.deepcopy(tutorial[0])
    backbone = policy[0].module
    backbone[0] = torch.nn.Linear(3, 32)
    backbone[2] = torch.nn.Linear(32, 4)
    with pytest.raises(
        tdaot.WeightsError,
        match=r"'module\.module\.0\.module\.0\.bias' is float32 \[32\], the package's is float32 \[64\]",
    ):
        tdaot.export_weights(policy, tutorial[2].path, tmp_path / "other.tdw")


def _with_metadata(tutorial, tmp_path, change):
    """A copy of the tutorial package, ``old.pt2``, with ``change(metadata)`` applied to each of
    its models' AOTInductor metadata."""
    records = _torch_compat.read_archive(tutorial[2].path)
    for name, data in records.items():
        if name.endswith("_metadata.json"):
            metadata = json.loads(data)
            change(metadata)
            records[name] = json.dumps(metadata).encode()
    old = tmp_path / "old.pt2"
    _torch_compat.write_archive(str(old), records)
    return old


def _with_record(change):
    """A metadata change applying ``change`` to the model's weight record."""

    def changed(metadata):
        record = json.loads(metadata[RECORD_KEY])
        change(record)
        metadata[RECORD_KEY] = json.dumps(record, sort_keys=True)

    return changed


def test_export_weights_refuses_a_package_built_without_weight_records(tutorial, tmp_path):
    """A package of an earlier tdaot: its models' metadata lack the weight record."""
    old = _with_metadata(tutorial, tmp_path, lambda metadata: metadata.pop(RECORD_KEY, None))
    with pytest.raises(tdaot.WeightsError, match=f"package '{old}' .* records nothing about its weights"):
        tdaot.export_weights(tutorial[0], old, tmp_path / "old.tdw")


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda record: record.pop("tuning"),
            r"\(model '\w+'\) does not record its tuning: it was built by an earlier tdaot",
        ),
        (
            lambda record: record["tuning"].update(rewrites=["an_older_rewrite"]),
            r"\(model '\w+'\) was built with another tuning than this tdaot compiles it with "
            r"\(differs in 'rewrites': .*an_older_rewrite",
        ),
    ],
    ids=["no-tuning-recorded", "other-rewrites"],
)
def test_export_weights_refuses_a_package_compiled_with_another_tuning(tutorial, tmp_path, change, message):
    """Its constants could have the names and shapes of ours in another order: refused before
    anything is compiled."""
    old = _with_metadata(tutorial, tmp_path, _with_record(change))
    with pytest.raises(tdaot.WeightsError, match=f"package '{old}' " + message) as caught:
        tdaot.export_weights(tutorial[0], old, tmp_path / "old.tdw")
    assert caught.value.path == str(old)
    assert not (tmp_path / "old.tdw").exists()


def test_export_weights_refuses_a_package_built_with_another_torch(tutorial, tmp_path, monkeypatch):
    built_with = re.escape(torch.__version__)
    monkeypatch.setattr(torch, "__version__", "2.99.0")
    with pytest.raises(
        tdaot.WeightsError,
        match=rf"was built with torch {built_with}, this process runs torch 2\.99\.0: "
        r"make its weight files with the torch it was built with",
    ):
        tdaot.export_weights(tutorial[0], tutorial[2].path, tmp_path / "other.tdw")


def test_the_signed_bytes_are_the_same_in_python_and_cpp_and_exclude_signatures(
    native, weight_file, tmp_path
):
    path = weight_file[0]
    payload = signing_payload(path)
    assert payload == _C.weights_signing_payload(path)
    metadata = read_metadata(path)
    assert (
        payload
        == (
            f"{FORMAT}\nbase_sha256 {metadata['tdaot.base_sha256']}\n"
            f"base_manifest_sha256 {metadata['tdaot.base_manifest_sha256']}\n"
            f"weights_sha256 {weight_file[1]}\n"
        ).encode()
    )
    assert weight_file[1] == canonical_digest(_tensors(path)) == metadata["tdaot.weights_sha256"]
    with safetensors.safe_open(path, "pt") as file:
        metadata = file.metadata()
    signed = tmp_path / "signed.tdw"
    safetensors.torch.save_file(_tensors(path), signed, metadata={**metadata, "tdaot.signatures": "[]"})
    assert signing_payload(signed) == payload == _C.weights_signing_payload(str(signed))
    native.swap_weights(str(signed))
    assert native.weights_sha256 == weight_file[1]


# --- signed weight files ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def signed_package(tutorial, keys, tmp_path_factory):
    """A copy of the tutorial package signed with keys.private (same manifest, another file
    sha256)."""
    path = tmp_path_factory.mktemp("signed") / "signed.pt2"
    shutil.copyfile(tutorial[2].path, path)
    tdaot.sign(path, keys.private)
    return str(path)


@pytest.fixture(scope="module")
def signed_weights(weight_file, signed_package, keys, tmp_path_factory):
    """(path, digest): weight_file's tensors made for the signed package, signed with keys.private
    (no compile: a weight file made for a package records that package's sha256s)."""
    path = _for_signed(signed_package, weight_file, tmp_path_factory.mktemp("signed-weights"), "v2.tdw")
    tdaot.sign(path, keys.private)
    return path, weight_file[1]


@pytest.fixture
def trusting(signed_package, keys):
    """A fresh load of the signed package that trusts keys.public only."""
    return tdaot.load(signed_package, trusted_keys=[keys.public])


def _for_signed(signed_package, weight_file, tmp_path, name):
    """An unsigned weight file of ``weight_file``'s tensors made for the signed package."""
    return _rewrite(tmp_path, weight_file, lambda t: None, base=package_identity(signed_package), name=name)


def _metadata(path) -> dict[str, str]:
    with safetensors.safe_open(path, "pt") as file:
        return file.metadata()


def test_signing_a_weight_file_changes_only_its_signatures(signed_package, weight_file, keys, tmp_path):
    path = _for_signed(signed_package, weight_file, tmp_path, "v2.tdw")
    before, payload, tensors = _metadata(path), signing_payload(path), _tensors(path)
    assert tdaot.sign(path, keys.private) == key_id(keys.private)
    tdaot.sign(path, keys.other_private.read_text())  # a second key, as a PEM text
    tdaot.sign(path, keys.private)  # again: replaces its own signature
    after = _metadata(path)
    assert {k: v for k, v in after.items() if k != SIGNATURES_KEY} == before
    assert sorted(s["key_id"] for s in json.loads(after[SIGNATURES_KEY])) == sorted(
        [key_id(keys.private), key_id(keys.other_private)]
    )
    assert signing_payload(path) == payload == _C.weights_signing_payload(path)
    assert all(torch.equal(value, tensors[name]) for name, value in _tensors(path).items())
    for public in (keys.public, keys.other_public):
        info = tdaot.verify_weights(path, trusted_keys=[public])
        assert info["signed_by"] == key_id(public.with_name("private.pem"))
        assert info["weights_sha256"] == weight_file[1]
        assert info["base_sha256"] == tdaot.verify_package(signed_package)


def test_export_weights_signs_with_sign_key(weight_file, keys):
    info = tdaot.verify_weights(weight_file[0], trusted_keys=[keys.public])
    assert info["signed_by"] == key_id(keys.private) and info["weights_sha256"] == weight_file[1]


def test_signed_weights_swap_in_with_trusted_keys(trusting, signed_weights, retrained, keys):
    path, digest = signed_weights
    assert tdaot.verify_weights(path, trusted_keys=[keys.public])["signed_by"] == key_id(keys.private)
    trusting.swap_weights(path)
    assert trusting.weights_sha256 == digest
    assert_close(outputs(trusting, 1), eager(retrained, 1))
    assert_close(outputs(trusting, 8), eager(retrained, 8))


def _unsigned(path, tmp_path):
    """``path`` with its signature entry removed (tensors and every other entry kept)."""
    metadata = {k: v for k, v in _metadata(path).items() if k != SIGNATURES_KEY}
    stripped = tmp_path / "stripped.tdw"
    safetensors.torch.save_file(_tensors(path), stripped, metadata=metadata)
    return str(stripped)


def _forged(path, tmp_path):
    """``path`` with a tensor changed, its digest recomputed and its signatures kept."""

    def change(tensors):
        key = _first(tensors, "weights/")
        tensors[key] = tensors[key] + 1

    forged = _rewrite(tmp_path, (path,), change, name="forged.tdw")
    write_signatures(forged, forged, json.loads(_metadata(path)[SIGNATURES_KEY]))
    return forged


def _tampered(path, tmp_path):
    """``path`` with one tensor byte changed after signing."""
    data = open(path, "rb").read()
    tampered = tmp_path / "tampered.tdw"
    tampered.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    return str(tampered)


def test_unvouched_weight_files_are_refused_and_the_old_weights_keep_serving(
    trusting, signed_package, signed_weights, weight_file, keys, tmp_path
):
    before = {batch: outputs(trusting, batch) for batch in OBSERVATIONS}
    built_with = trusting.weights_sha256
    ours, theirs = key_id(keys.private), key_id(keys.other_private)
    other = _for_signed(signed_package, weight_file, tmp_path, "other.tdw")
    tdaot.sign(other, keys.other_private)
    cases = [
        (
            _for_signed(signed_package, weight_file, tmp_path, "unsigned.tdw"),
            tdaot.SignatureError,
            rf"is not signed, but trusted keys are set \(trusted key ids: {ours}\)",
        ),
        (_unsigned(signed_weights[0], tmp_path), tdaot.SignatureError, "is not signed"),
        (
            other,
            tdaot.SignatureError,
            rf"is signed only by keys that are not trusted \(key ids: {theirs}; trusted key ids: {ours}\)",
        ),
        (
            _forged(signed_weights[0], tmp_path),
            tdaot.SignatureError,
            rf"has a signature by trusted key {ours} \(trusted key file '{keys.public}'\) that does not "
            "match its header: the header was changed after it was signed",
        ),
        # A byte changed under the signed header: its digest refuses it, not its signature.
        (_tampered(signed_weights[0], tmp_path), tdaot.WeightsError, "does not match its digest"),
    ]
    for path, error, message in cases:
        with pytest.raises(error, match=f"weight file '{re.escape(path)}' {message}") as caught:
            trusting.swap_weights(path)
        assert caught.value.path == path
        assert trusting.weights_sha256 == built_with
        for batch in OBSERVATIONS:
            assert_equal(outputs(trusting, batch), before[batch])
        if error is tdaot.SignatureError:
            with pytest.raises(tdaot.SignatureError, match=message):
                tdaot.verify_weights(path, trusted_keys=[keys.public])
    assert not isinstance(caught.value, tdaot.SignatureError)


def test_without_trusted_keys_weight_signatures_are_not_read(signed_package, weight_file, tmp_path):
    native = tdaot.load(signed_package)
    native.swap_weights(_for_signed(signed_package, weight_file, tmp_path, "unsigned.tdw"))
    assert native.weights_sha256 == weight_file[1]


def test_sign_refuses_what_is_neither_and_malformed_signatures(signed_package, weight_file, keys, tmp_path):
    notes = tmp_path / "notes.tdw"
    notes.write_text("not a weight file")
    with pytest.raises(tdaot.PackageError, match=f"'{notes}' is neither a tdaot package") as caught:
        tdaot.sign(notes, keys.private)
    assert caught.value.path == str(notes)
    path = _for_signed(signed_package, weight_file, tmp_path, "malformed.tdw")
    write_signatures(path, path, {"not": "a list"})
    before = open(path, "rb").read()
    message = f"weight file '{path}' has a malformed tdaot.signatures entry"
    with pytest.raises(tdaot.SignatureError, match=message):
        tdaot.sign(path, keys.private)
    assert open(path, "rb").read() == before
    missing = tmp_path / "missing.pem"
    with pytest.raises(tdaot.SignatureError, match=f"signing key file '{missing}' does not exist"):
        tdaot.export_weights(torch.nn.Identity(), signed_package, tmp_path / "never.tdw", sign_key=missing)
    assert not (tmp_path / "never.tdw").exists()


def test_sign_and_verify_commands_take_weight_files(signed_package, weight_file, keys, tmp_path, capsys):
    path = _for_signed(signed_package, weight_file, tmp_path, "v2.tdw")
    public = str(keys.public)
    assert main(["verify", path, "--public-key", public]) == 1
    assert f"tdaot verify: SignatureError: weight file '{path}' is not signed" in capsys.readouterr().err
    assert main(["sign", path, "--key", str(keys.private)]) == 0
    assert f"signed {path} with key {key_id(keys.private)}" in capsys.readouterr().out
    assert main(["verify", path, "--public-key", public]) == 0
    out = capsys.readouterr().out
    assert "weight file, its tensors match their digests; signed by a trusted key" in out
    assert f"weights sha256 {weight_file[1]}" in out
    assert main(["verify", path, "--sha256", "0" * 64]) == 2
    assert f"--sha256 pins packages; '{path}' is a weight file" in capsys.readouterr().err


def test_weights_made_before_the_package_was_signed_still_fit(signed_package, weight_file, keys, tmp_path):
    """weight_file was exported for the unsigned tutorial package; signing that package (once,
    then again by a second key) changes its file sha256, not its manifest: the swap matches
    the manifest's sha256."""
    package = tmp_path / "cosigned.pt2"
    shutil.copyfile(signed_package, package)
    for signed_by_now in (keys.private, keys.other_private):
        tdaot.sign(package, signed_by_now)
        native = tdaot.load(package, trusted_keys=[keys.public])
        info = tdaot.verify_weights(weight_file[0])
        file_sha256, manifest_sha256 = package_identity(package)
        assert info["base_sha256"] != file_sha256 and info["base_manifest_sha256"] == manifest_sha256
        native.swap_weights(weight_file[0])
        assert native.weights_sha256 == weight_file[1]
