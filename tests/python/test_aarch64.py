"""cpu_target="aarch64" on this x86 host: one package for 64-bit ARM of a robot-like policy (a conv
encoder on a nested camera key, an MLP head, a GRU and an LSTM stepping side by side with resets),
run by the aarch64 tdaot-lite of `make lite-aarch64` under qemu-user; what the package and the
bundle hold (aarch64 code only, no symbol version newer than JetPack 6's glibc 2.35 / GLIBCXX
3.4.30); the refusals on this host by name; a weight file exported here and a package signed here,
both checked there; robot_service cross-built with the toolchain file and run for a few hundred
ticks. qemu's timings are not measured: they say nothing of an ARM core's.

One compile (the package's batch-1 lite model), shared by every test; the refusals of what
cannot be built for aarch64 are decided before any compile.
"""

from __future__ import annotations

import glob
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest
import torch
from elftools.elf.elffile import ELFFile
from examples.torchrl_policies import recurrent_policies
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

import tdaot
from tdaot.errors import BuildError, HostMismatchError, LiteWarning
from tdaot.testing import assert_parity
from tdaot.testing import lite_runner as lite

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PREFIX = os.path.join(REPO, "build", "aarch64", "prefix")
TOOLCHAIN = os.path.join(REPO, "cmake", "aarch64-linux-gnu.cmake")
# JetPack 6 (Ubuntu 22.04): glibc 2.35, libstdc++ of GCC 12.
MAX_VERSIONS = {"GLIBC": (2, 35), "GLIBCXX": (3, 4, 30)}

_MISSING = [
    what
    for what, found in (
        ("aarch64-linux-gnu-g++ (g++-aarch64-linux-gnu)", shutil.which("aarch64-linux-gnu-g++")),
        ("qemu-aarch64-static (qemu-user-static)", shutil.which("qemu-aarch64-static")),
        (
            "the aarch64 tdaot-lite (make lite-aarch64)",
            os.path.isfile(os.path.join(PREFIX, "bin", "tdaot-lite")),
        ),
    )
    if not found
]
# `make test` installs and builds all three (make lite-aarch64) before pytest runs.
pytestmark = pytest.mark.skipif(bool(_MISSING), reason="not installed: " + ", ".join(_MISSING))


class _Camera(nn.Module):
    """A small conv encoder of a float image [3, 8, 8]."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 4, 3, stride=2), nn.ReLU(), nn.Flatten(), nn.Linear(36, 8), nn.Tanh()
        )

    def forward(self, pixels):
        return self.net(pixels)


def robot_policy():
    """A camera conv encoder on a nested key, an MLP head over it and the observation, and a GRU
    and an LSTM (torchrl's, as they come) beside it, with is_init resets."""
    rnn_policy, example = recurrent_policies(("gru", "lstm"))
    torch.manual_seed(1)
    policy = TensorDictSequential(
        *rnn_policy,
        TensorDictModule(_Camera(), in_keys=[("camera", "pixels")], out_keys=[("camera", "embed")]),
        TensorDictModule(_Head(), in_keys=[("camera", "embed"), "observation"], out_keys=[("arm", "action")]),
    )
    batch = example.batch_size[0]
    example.set(("camera", "pixels"), torch.randn(batch, 3, 8, 8))
    return policy.eval(), example


class _Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8 + 3, 32), nn.ELU(), nn.Linear(32, 4))

    def forward(self, embed, observation):
        return self.net(torch.cat([embed, observation], dim=-1))


@pytest.fixture(scope="module")
def arm(tmp_path_factory):
    """(policy, example, artifact, cache): the robot policy built for aarch64 (dynamic batch: its
    dynamic model is left out with a LiteWarning naming it) through the artifact cache ``cache``
    (the pytest plugin's test builds it again from there)."""
    policy, example = robot_policy()
    path = tmp_path_factory.mktemp("aarch64") / "robot.pt2"
    cache = tmp_path_factory.mktemp("aarch64-cache")
    with pytest.warns(
        LiteWarning, match=r"dynamic-batch model 'model' needs libtorch.*not built for aarch64"
    ):
        # No factory, as the pytest plugin builds it: its test below is served by the cache.
        artifact = tdaot.build(policy, example, path, cpu_target="aarch64", cache=cache)
    return policy, example, artifact, cache


def _model_files(package: str) -> dict[str, bytes]:
    with zipfile.ZipFile(package) as archive:
        return {n: archive.read(n) for n in archive.namelist() if n.endswith(".so")}


def test_the_package_holds_aarch64_lite_models_only_and_says_so(arm):
    _, _, artifact, _ = arm
    manifest = artifact.manifest
    assert (manifest.architecture, manifest.cpu_target, manifest.cpu_isa) == ("aarch64", "aarch64", "asimd")
    assert [(m.name, m.batch.min, m.batch.max, m.lite.runs) for m in manifest.models] == [("b1", 1, 1, True)]
    libraries = _model_files(artifact.path)
    assert libraries
    for name, data in libraries.items():
        elf = ELFFile(io.BytesIO(data))
        assert elf["e_machine"] == "EM_AARCH64", name
        needed = [
            t.needed for t in elf.get_section_by_name(".dynamic").iter_tags() if t.entry.d_tag == "DT_NEEDED"
        ]
        assert not [n for n in needed if n.startswith(("libtorch", "libc10"))], needed
    shown = manifest.describe()
    assert "cpu target aarch64, isa asimd, architecture aarch64" in shown
    done = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "tdaot"), "inspect", str(artifact.path)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "architecture aarch64" in done.stdout


def test_parity_with_eager_through_the_aarch64_lite_runtime_under_qemu(arm):
    policy, example, artifact, _ = arm
    # A rollout with resets (the recurrent state carried by the runtime), every output key.
    report = assert_parity(policy, artifact, example, runtime="lite", rtol=1e-5, atol=1e-5)
    assert {row.key for row in report.rows} >= {"arm.action", "gru.action", "lstm.action"}
    assert all(row.ok for row in report.rows)
    tool = os.path.join(PREFIX, "bin", "tdaot-lite")
    assert any(f == os.path.realpath(tool) or f == tool for f in report.libraries), report.libraries[:5]
    assert any(os.path.basename(f).startswith("libtdaot_lite.so") for f in report.libraries)


def test_this_host_refuses_the_aarch64_package_by_name_before_loading_it(arm, tmp_path):
    _, _, artifact, _ = arm
    with pytest.raises(HostMismatchError, match=r"was built for aarch64, but this host is x86_64"):
        tdaot.load(artifact.path)
    x86_tool = lite.find_tool()
    done = subprocess.run(
        [x86_tool, "run", str(artifact.path), "--batch", "1"], capture_output=True, text=True
    )
    assert done.returncode != 0
    assert "was built for aarch64, but this host is x86_64" in done.stderr


def _versions(data: bytes) -> set[str]:
    section = ELFFile(io.BytesIO(data)).get_section_by_name(".gnu.version_r")
    if section is None:
        return set()
    return {aux.name for _, auxiliaries in section.iter_versions() for aux in auxiliaries}


def _too_new(versions: set[str]) -> list[str]:
    newer = []
    for version in versions:
        match = re.fullmatch(r"(GLIBC|GLIBCXX)_([0-9.]+)", version)
        if match and tuple(map(int, match.group(2).split("."))) > MAX_VERSIONS[match.group(1)]:
            newer.append(version)
    return sorted(newer)


def test_no_symbol_version_newer_than_jetpack_6_in_the_bundle_or_the_models(arm):
    _, _, artifact, _ = arm
    bundles = glob.glob(os.path.join(REPO, "dist", "tdaot-lite-*-linux-aarch64.tar.gz"))
    assert bundles, "make lite-aarch64 writes the bundle"
    files = dict(_model_files(artifact.path))
    with tarfile.open(bundles[0]) as tar:
        for member in tar.getmembers():
            data = tar.extractfile(member).read() if member.isfile() else b""
            if data[:4] == b"\x7fELF":
                files[member.name] = data
    names = set(files)
    assert any(n.endswith("/bin/tdaot-lite") for n in names) and any(
        n.endswith("/lib/libtdaot_lite.so") for n in names
    )
    assert any(n.endswith("/lib/libsleef.so.3") for n in names)
    for name, data in files.items():
        assert ELFFile(io.BytesIO(data))["e_machine"] == "EM_AARCH64", name
        assert not _too_new(_versions(data)), (name, _too_new(_versions(data)))
    # The check itself: a version past the limit is caught.
    assert _too_new({"GLIBC_2.34", "GLIBC_2.36", "GLIBCXX_3.4.31"}) == ["GLIBCXX_3.4.31", "GLIBC_2.36"]


def _lite_rows(package, example, keys=None, **options):
    """One batch-1 step of the package's lite model on the example's first row, every input."""
    keys = keys or _input_keys(package)
    steps = {key: example.get(tuple(key.split(".")))[:1].tolist() for key in keys}
    return lite.run(package, 1, steps, **options).outputs[0]


def _input_keys(package) -> list[str]:
    from tdaot.manifest import read_manifest

    return read_manifest(os.fspath(package)).input_keys


def test_a_weight_file_exported_here_swaps_in_on_aarch64(arm, tmp_path):
    policy, example, artifact, _ = arm
    changed, _ = robot_policy()
    with torch.no_grad():
        for p in changed.parameters():
            p.mul_(0.5)
    weights = tmp_path / "v2.tdw"
    tdaot.export_weights(changed, artifact.path, weights, example=example)
    before = _lite_rows(artifact.path, example)
    after = _lite_rows(artifact.path, example, weights=weights)
    assert before["arm.action"] != after["arm.action"]
    # The swapped model matches the changed policy's eager output.
    with torch.no_grad():
        expected = changed(example[:1].clone())["arm", "action"]
    torch.testing.assert_close(torch.tensor(after["arm.action"]), expected, rtol=1e-5, atol=1e-5)


def test_a_package_signed_here_verifies_on_aarch64_and_a_changed_byte_is_refused(arm, tmp_path):
    _, example, artifact, _ = arm
    from tdaot.signing import keygen

    private, public = keygen(tmp_path / "key")
    other, _ = keygen(tmp_path / "other")
    keys = _input_keys(artifact.path)
    signed = tmp_path / "signed.pt2"
    shutil.copy(artifact.path, signed)
    tdaot.sign(signed, private)
    assert "arm.action" in _lite_rows(signed, example, trusted_keys=[public], keys=keys)
    # One byte of the model library changed after signing.
    data = bytearray(signed.read_bytes())
    data[data.index(b"\x7fELF") + 4096] ^= 0x01
    tampered = tmp_path / "tampered.pt2"
    tampered.write_bytes(bytes(data))
    with pytest.raises(lite.LiteToolError) as caught:
        _lite_rows(tampered, example, trusted_keys=[public], keys=keys)
    assert "tampered.pt2" in str(caught.value) and caught.value.returncode != 0
    # Signed by a key the robot does not trust.
    stranger = tmp_path / "stranger.pt2"
    shutil.copy(artifact.path, stranger)
    tdaot.sign(stranger, other)
    with pytest.raises(
        lite.LiteToolError, match=r"stranger.pt2' is signed only by keys that are not trusted"
    ):
        _lite_rows(stranger, example, trusted_keys=[public], keys=keys)


def test_robot_service_cross_built_with_the_toolchain_file_runs_on_aarch64(arm, tmp_path):
    _, _, artifact, _ = arm
    build = tmp_path / "service"
    cmake = shutil.which("cmake") or os.path.join(os.path.dirname(sys.executable), "cmake")
    source = os.path.join(REPO, "cpp", "examples", "robot_service")
    configure = subprocess.run(
        [
            cmake,
            "-S",
            source,
            "-B",
            str(build),
            f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAIN}",
            f"-DCMAKE_PREFIX_PATH={PREFIX}",
        ],
        capture_output=True,
        text=True,
    )
    assert configure.returncode == 0, configure.stdout + configure.stderr
    built = subprocess.run([cmake, "--build", str(build)], capture_output=True, text=True)
    assert built.returncode == 0, built.stdout + built.stderr
    service = build / "robot_service"
    with open(service, "rb") as f:
        assert ELFFile(f)["e_machine"] == "EM_AARCH64"
    prefix, env = lite.emulation("aarch64")
    done = subprocess.run(
        [*prefix, str(service), str(artifact.path), "--steps", "300", "--rate", "1000"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "300" in done.stdout


PLUGIN_TEST = """
import sys

sys.path[:0] = [{tests!r}, {repo!r}]
from test_aarch64 import robot_policy


def test_the_robot_package(tdaot_package, tdaot_parity):
    policy, example = robot_policy()
    package = tdaot_package(policy, example, cpu_target="aarch64")
    assert package.manifest.architecture == "aarch64" and package.cache_hit  # the module's build
    report = tdaot_parity(policy, package, example)
    assert report.runtime == "lite" and all(row.ok for row in report.rows)
"""


def test_the_pytest_plugin_checks_an_aarch64_package_with_tdaot_runtime_lite(arm, tmp_path):
    tests = tmp_path / "suite"
    tests.mkdir()
    here = os.path.dirname(os.path.abspath(__file__))
    (tests / "test_robot.py").write_text(PLUGIN_TEST.format(tests=here, repo=REPO))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-c",
        str(tmp_path / "pytest.ini"),
    ]
    done = subprocess.run(
        [
            *command,
            str(tests),
            "--tdaot-runtime=lite",
            f"--tdaot-cache-dir={arm[3]}",
            "-W",
            "ignore::UserWarning",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout


def test_what_cannot_run_on_aarch64_is_refused_by_name_before_compiling(tmp_path):
    policy, example = robot_policy()
    with pytest.raises(BuildError, match=r"cpu_target 'aarch64': .* has no model that runs on aarch64.*: 32"):
        with pytest.warns(LiteWarning):
            tdaot.build(policy, example, tmp_path / "big.pt2", cpu_target="aarch64", specialize=[32])
    assert not list(tmp_path.iterdir())


def test_the_harness_names_what_is_missing(monkeypatch, tmp_path):
    monkeypatch.setenv(lite.AARCH64_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match=r"TDAOT_LITE_AARCH64=.*nowhere.* is not an executable file"):
        lite.find_tool_for("aarch64")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"needs qemu-aarch64-static, which is not on PATH"):
        lite.emulation("aarch64")
    assert lite.emulation(lite.host_architecture()) == ([], {})
