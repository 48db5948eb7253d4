"""tdaot.load: the native runner through the bindings, its validation and its errors."""

from __future__ import annotations

import json
import os
import shutil
import zipfile

import pytest
import torch
from tensordict import TensorDict

import tdaot


def _obs(batch: int, dtype=torch.float32) -> torch.Tensor:
    return torch.linspace(-1, 1, batch * 3, dtype=dtype).reshape(batch, 3)


def test_call_with_a_tensordict_returns_the_out_keys(tutorial, tutorial_native):
    _, example, _ = tutorial
    out = tutorial_native(example)
    assert isinstance(out, TensorDict)
    assert set(out.keys()) == {"loc", "scale", "sample"}
    assert out.batch_size == example.batch_size
    torch.testing.assert_close(out["sample"], out["loc"])  # deterministic Normal -> its mean
    assert (out["scale"] > 0).all()


def test_extra_tensordict_entries_are_ignored(tutorial_native):
    td = TensorDict({"observation": _obs(2), "reward": torch.zeros(2, 1)}, batch_size=[2])
    assert tutorial_native(td)["loc"].shape == (2, 2)


def test_keyword_mapping_and_positional_forms_agree(nested, nested_native):
    _, example, _ = nested
    obs, joints = example["agents", "observation"], example["robot", "joints"]
    from_td = nested_native(example)
    from_mapping = nested_native({("agents", "observation"): obs, "robot.joints": joints})
    from_kwargs = nested_native(**{"agents.observation": obs, "robot.joints": joints})
    positional = nested_native.run_positional(obs, joints)
    for out in (from_mapping, from_kwargs):
        assert (out == from_td).all()
    torch.testing.assert_close(positional[0], from_td["agents", "action"], rtol=0, atol=0)
    torch.testing.assert_close(positional[1], from_td["robot", "command"], rtol=0, atol=0)


def test_metadata_holds_the_manifest_and_aoti_keys(tutorial_native):
    metadata = tutorial_native.metadata
    assert json.loads(metadata["tdaot.manifest"])["schema_version"] == 1
    assert metadata["AOTI_DEVICE_KEY"] == "cpu"
    assert "observation" in repr(tutorial_native)


# --- input validation: the bad-input matrix is in test_bad_inputs.py ---------------------
def test_an_input_error_carries_the_key_and_is_a_tdaot_error(tutorial_native):
    with pytest.raises(tdaot.DtypeError, match=r"'observation' has dtype float64, expected float32") as info:
        tutorial_native(observation=_obs(2, torch.float64))
    assert isinstance(info.value, tdaot.InputError) and isinstance(info.value, tdaot.TdaotError)
    assert info.value.key == "observation"


# --- packages that cannot be loaded ---------------------------------------------------
def test_missing_package_names_the_path(tmp_path):
    path = tmp_path / "nope.pt2"
    with pytest.raises(tdaot.PackageError, match=f"{path}") as info:
        tdaot.load(path)
    assert info.value.path == str(path)


@pytest.mark.parametrize("content", [b"", os.urandom(4096)], ids=["empty", "random-bytes"])
def test_non_package_file_names_the_path(tmp_path, content):
    path = tmp_path / "broken.pt2"
    path.write_bytes(content)
    with pytest.raises(tdaot.PackageError, match=f"{path}.*not a .pt2 package"):
        tdaot.load(path)


def test_directory_and_dev_null_are_refused(tmp_path):
    with pytest.raises(tdaot.PackageError, match=str(tmp_path)):
        tdaot.load(tmp_path)
    with pytest.raises(tdaot.PackageError, match="/dev/null"):
        tdaot.load("/dev/null")


def _rewrite_manifest(source: str, target, edit) -> None:
    """Copies a package, passing its AOTInductor metadata through ``edit``."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("wrapper_metadata.json"):
                metadata = json.loads(data)
                edit(metadata)
                data = json.dumps(metadata).encode()
            dst.writestr(info, data)


def _edit_manifest(change):
    def edit(metadata):
        manifest = json.loads(metadata["tdaot.manifest"])
        change(manifest)
        metadata["tdaot.manifest"] = json.dumps(manifest)

    return edit


MANIFEST_FAULTS = [
    pytest.param(
        lambda md: md.pop("tdaot.manifest"),
        tdaot.ManifestError,
        "has no 'tdaot.manifest' metadata",
        id="no-manifest",
    ),
    pytest.param(
        lambda md: md.update({"tdaot.manifest": "{not json"}), tdaot.ManifestError, "JSON|json", id="not-json"
    ),
    pytest.param(
        _edit_manifest(lambda m: m.update(schema_version=99)),
        tdaot.ManifestError,
        "schema_version",
        id="schema-version",
    ),
    pytest.param(
        _edit_manifest(lambda m: m["inputs"][0].update(dtype="float8")),
        tdaot.ManifestError,
        r"inputs\[0\]\.dtype.*float8",
        id="unknown-dtype",
    ),
    pytest.param(
        _edit_manifest(lambda m: m.pop("outputs")), tdaot.ManifestError, "outputs", id="missing-field"
    ),
    pytest.param(
        _edit_manifest(lambda m: m.update(torch_version="1.13.1")),
        tdaot.HostMismatchError,
        r"1\.13.*2\.13",
        id="torch-version",
    ),
]


@pytest.mark.parametrize(("edit", "error", "message"), MANIFEST_FAULTS)
def test_bad_manifest_is_refused_naming_the_package(tutorial, tmp_path, edit, error, message):
    path = tmp_path / "edited.pt2"
    _rewrite_manifest(tutorial[2].path, path, edit)
    with pytest.raises(error, match=message) as info:
        tdaot.load(path)
    assert str(path) in str(info.value)


def test_cuda_package_on_a_host_without_cuda_is_refused(tutorial, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    path = tmp_path / "cuda.pt2"
    _rewrite_manifest(tutorial[2].path, path, _edit_manifest(lambda m: m.update(device="cuda")))
    with pytest.raises(tdaot.HostMismatchError, match="cuda"):
        tdaot.load(path)


def test_python_reader_refuses_the_same_packages(tmp_path):
    path = tmp_path / "x.pt2"
    shutil.copy(__file__, path)
    with pytest.raises(tdaot.PackageError, match="not a .pt2 package"):
        tdaot.read_manifest(path)


# --- load options (threads sharing a policy: test_concurrency.py) ---------------------
def test_intra_op_threads_is_set_at_load_or_left_alone(tutorial):
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        tdaot.load(tutorial[2].path)  # None: leave the Python process's setting alone
        assert torch.get_num_threads() == 2
        tdaot.load(tutorial[2].path, intra_op_threads=1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"num_runners": 0}, r"PolicyOptions.num_runners must be >= 1, got 0"),
        ({"warmup_runs": -1}, r"PolicyOptions.warmup_runs must be >= 0, got -1"),
        ({"intra_op_threads": -1}, r"PolicyOptions.intra_op_threads must be >= 0"),
    ],
    ids=["runners", "warmup", "threads"],
)
def test_invalid_load_options_are_refused(tutorial, options, message):
    with pytest.raises(tdaot.TdaotError, match=message):
        tdaot.load(tutorial[2].path, **options)
