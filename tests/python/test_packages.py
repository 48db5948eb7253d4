"""Broken, hostile and tampered packages: what tdaot.load and tdaot.verify refuse, with
what message, and that nothing is left on disk (or written outside the runner's own
temporary directory) on any path."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import struct
import zipfile
from pathlib import Path

import pytest
import torch

import tdaot

# --- building packages to refuse ----------------------------------------------------------
TOP = "package/"  # the archive's top folder (tdaot stages every package as package.pt2)
MODEL_DIR = "data/aotinductor/model/"


def _records(path) -> dict[str, bytes]:
    """The package's records by name without the top folder, in archive order."""
    with zipfile.ZipFile(path) as archive:
        return {info.filename[len(TOP) :]: archive.read(info) for info in archive.infolist()}


def _write(path, records: dict[str, bytes], *, top: str = TOP) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in records.items():
            archive.writestr(zipfile.ZipInfo(top + name), data)
    return Path(path)


def _metadata_name(records) -> str:
    return next(n for n in records if n.startswith(MODEL_DIR) and n.endswith("wrapper_metadata.json"))


def _library_name(records) -> str:
    return next(n for n in records if n.startswith(MODEL_DIR) and n.endswith(".so"))


def _manifest(records) -> dict:
    return json.loads(json.loads(records[_metadata_name(records)])["tdaot.manifest"])


def _set_manifest(records, manifest: dict) -> None:
    """Into the metadata of every model: the runtime refuses models carrying different ones."""
    for name in [n for n in records if n.endswith("wrapper_metadata.json")]:
        metadata = json.loads(records[name])
        metadata["tdaot.manifest"] = json.dumps(manifest)
        records[name] = json.dumps(metadata).encode()


def _reseal(records) -> None:
    """Records the current files' digests, as a build would: the package is then
    self-consistent, so what is tested is what comes after the digest check."""
    manifest = _manifest(records)
    manifest["files"] = {
        name: hashlib.sha256(data).hexdigest()
        for name, data in records.items()
        if name in manifest["files"] or name.startswith(MODEL_DIR) and not name.endswith("_metadata.json")
    }
    _set_manifest(records, manifest)


def _set_declared_size(path, name: str, size: int) -> None:
    """Overwrites the uncompressed size the zip headers declare for entry ``name``."""
    data = bytearray(Path(path).read_bytes())
    with zipfile.ZipFile(path) as archive:
        local = archive.getinfo(name).header_offset
    struct.pack_into("<I", data, local + 22, size)  # local file header
    encoded = name.encode()
    central = data.rfind(b"PK\x01\x02", 0, data.rfind(b"PK\x05\x06"))
    while data[central + 46 : central + 46 + len(encoded)] != encoded:
        central = data.rfind(b"PK\x01\x02", 0, central)
    struct.pack_into("<I", data, central + 24, size)  # central directory record
    Path(path).write_bytes(bytes(data))


# --- fixtures --------------------------------------------------------------------------------
@pytest.fixture
def package(tutorial):
    """The tutorial package's records (fresh copy per test)."""
    return _records(tutorial[2].path)


@pytest.fixture
def extract_dir(tmp_path):
    """The temp_dir each load gets; every test ends with it empty (see _load)."""
    path = tmp_path / "extract"
    path.mkdir()
    return path


def _aoti_temp_dirs() -> set[str]:
    # AOTInductor's own loader extracts into /tmp/XXXXXX; tdaot must never go through it.
    return {name for name in os.listdir("/tmp") if re.fullmatch(r"[A-Za-z0-9]{6}", name)}


def _load(path, extract_dir, **options):
    """tdaot.load with temp_dir=extract_dir, checking that whatever happens nothing is left
    in it and nothing appears where AOTInductor's loader would have extracted."""
    before = _aoti_temp_dirs()
    try:
        return tdaot.load(path, temp_dir=extract_dir, **options)
    finally:
        assert os.listdir(extract_dir) == [], "the extraction directory was not removed"
        assert _aoti_temp_dirs() <= before, "something was extracted under /tmp"


def _refused(path, extract_dir, error, message, *, verify=True, **options):
    with pytest.raises(error, match=message) as info:
        _load(path, extract_dir, **options)
    assert str(path) in str(info.value) and info.value.path == str(path)
    if verify:  # tdaot.verify reads the package the same way (no extraction, no loading)
        with pytest.raises(error, match=message):
            tdaot.verify_package(path, options.get("expected_sha256"))


# --- the good path ------------------------------------------------------------------------
def test_a_built_package_lists_the_digest_of_every_file(tutorial, package):
    files = tutorial[2].manifest.files
    listed = {n for n in package if n.startswith("data/") and not n.endswith("_metadata.json")}
    assert set(files) == listed and _library_name(package) in files
    assert all(files[n] == hashlib.sha256(package[n]).hexdigest() for n in files)


def test_loading_leaves_nothing_on_disk(tutorial, extract_dir):
    native = _load(tutorial[2].path, extract_dir)
    assert native(observation=torch.ones(2, 3))["sample"].shape == (2, 2)


def test_pinned_digest_loads_in_either_case(tutorial, extract_dir):
    digest = hashlib.sha256(Path(tutorial[2].path).read_bytes()).hexdigest()
    assert tdaot.verify_package(tutorial[2].path) == digest == tutorial[2].sha256
    native = _load(tutorial[2].path, extract_dir, expected_sha256=digest.upper())
    assert native.sha256 == digest


# --- refused before anything is extracted -------------------------------------------------
def test_another_pinned_digest_is_refused(tutorial, extract_dir):
    _refused(
        tutorial[2].path,
        extract_dir,
        tdaot.IntegrityError,
        "has sha256 [0-9a-f]{64}, but the pinned expected_sha256 is f{64}",
        expected_sha256="F" * 64,
    )


def test_a_malformed_pin_names_the_value(tutorial, extract_dir):
    with pytest.raises(tdaot.TdaotError, match="expected_sha256 must be a sha256 digest .*got 'abc'"):
        _load(tutorial[2].path, extract_dir, expected_sha256="abc")


def test_missing_directory_device_and_pipe_name_the_path(tmp_path, extract_dir):
    _refused(tmp_path / "nope.pt2", extract_dir, tdaot.PackageError, "does not exist")
    _refused(tmp_path, extract_dir, tdaot.PackageError, "is a directory, not a .pt2 file")
    _refused("/dev/null", extract_dir, tdaot.PackageError, "is not a regular file, not a .pt2 file")
    os.mkfifo(tmp_path / "pipe.pt2")  # reading it would block forever
    _refused(tmp_path / "pipe.pt2", extract_dir, tdaot.PackageError, "is not a regular file")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "is empty, not a .pt2 package"),
        (os.urandom(4096), r"is not a .pt2 package \(not a zip archive\)"),
        (b"PK\x03\x04" + os.urandom(200), r"damaged or truncated zip archive"),
    ],
    ids=["empty", "random-bytes", "zip-magic-then-garbage"],
)
def test_files_that_are_no_zip_archive(tmp_path, extract_dir, content, message):
    path = tmp_path / "broken.pt2"
    path.write_bytes(content)
    _refused(path, extract_dir, tdaot.PackageError, message)


@pytest.mark.parametrize("keep", [0.5, 0.99], ids=["half", "central-directory-cut"])
def test_truncated_copies(tutorial, tmp_path, extract_dir, keep):
    data = Path(tutorial[2].path).read_bytes()
    path = tmp_path / "truncated.pt2"
    path.write_bytes(data[: int(len(data) * keep)])
    _refused(path, extract_dir, tdaot.PackageError, r"damaged or truncated zip archive")


@pytest.mark.parametrize(
    ("entry", "shown"),
    [
        ("package/data/aotinductor/model/../../../../../../tmp/{canary}", "'package/data/.*/tmp/{canary}'"),
        ("/tmp/{canary}", "'/tmp/{canary}'"),
        ("package/data/aotinductor/model/..\\..\\{canary}", r"'package/.*\.\.\\{canary}'"),
    ],
    ids=["dot-dot", "absolute", "backslash"],
)
def test_entries_climbing_out_of_the_directory(package, tmp_path, extract_dir, entry, shown):
    canary = f"tdaot-canary-{os.getpid()}-{len(entry)}"
    path = _write(tmp_path / "evil.pt2", package)
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr(zipfile.ZipInfo(entry.format(canary=canary)), b"pwned")
    assert entry.format(canary=canary) in zipfile.ZipFile(path).namelist()  # stored as written
    _refused(path, extract_dir, tdaot.PackageError, "has an unsafe entry " + shown.format(canary=canary))
    assert not Path("/tmp", canary).exists() and not (tmp_path / canary).exists()


@pytest.mark.parametrize(
    ("mode", "kind"),
    [(stat.S_IFLNK | 0o777, "a symbolic link"), (stat.S_IFIFO | 0o644, "a named pipe")],
    ids=["symlink", "fifo"],
)
def test_entries_that_are_not_regular_files(package, tmp_path, extract_dir, mode, kind):
    path = _write(tmp_path / "links.pt2", package)
    with zipfile.ZipFile(path, "a") as archive:
        info = zipfile.ZipInfo(TOP + MODEL_DIR + "libc.so")
        info.create_system = 3  # Unix: the mode lives in the high 16 bits
        info.external_attr = mode << 16
        archive.writestr(info, b"/lib/x86_64-linux-gnu/libc.so.6")
    _refused(path, extract_dir, tdaot.PackageError, f"entry 'package/{MODEL_DIR}libc.so' that is {kind}")


def test_an_entry_declaring_a_huge_size(package, tmp_path, extract_dir):
    path = tmp_path / "huge.pt2"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in package.items():
            archive.writestr(TOP + name, data)
    big = TOP + _library_name(package)
    _set_declared_size(path, big, 0xFFFF0000)
    _refused(
        path,
        extract_dir,
        tdaot.PackageError,
        f"entry '{big}' that declares 4294901760 bytes, more than the limit of 67108864",
        max_package_bytes=64 << 20,
        verify=False,
    )
    # With the default limit (4 GiB) it is the sum that gives it away.
    _set_declared_size(path, TOP + "archive_format", 0xFFFF0000)
    total = r"declares \d+ bytes in all its entries, more than the limit of 4294967296"
    _refused(path, extract_dir, tdaot.PackageError, total)


def test_a_file_above_the_size_limit(tutorial, extract_dir):
    size = os.path.getsize(tutorial[2].path)
    _refused(
        tutorial[2].path,
        extract_dir,
        tdaot.PackageError,
        f"is larger than the limit of {size - 1} bytes",
        max_package_bytes=size - 1,
        verify=False,
    )


def test_duplicate_entries_and_two_top_folders(package, tmp_path, extract_dir):
    path = _write(tmp_path / "twice.pt2", package)
    with zipfile.ZipFile(path, "a") as archive, pytest.warns(UserWarning, match="Duplicate name"):
        archive.writestr(TOP + _library_name(package), b"second copy")
    _refused(path, extract_dir, tdaot.PackageError, "two of its entries have the same name")
    path = _write(tmp_path / "mixed.pt2", package)
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("other/data/x", b"")
    _refused(path, extract_dir, tdaot.PackageError, "has entries under both 'package/' and 'other/data/x'")


def test_a_package_with_another_model_name_lists_what_it_has(package, tmp_path, extract_dir):
    renamed = {n.replace("/aotinductor/model/", "/aotinductor/policy/"): d for n, d in package.items()}
    path = _write(tmp_path / "renamed.pt2", renamed)
    _refused(
        path,
        extract_dir,
        tdaot.PackageError,
        r"is not a .pt2 package with an AOTInductor model 'model' \(models in it: b1, policy\)",
    )


# --- manifests that do not belong ---------------------------------------------------------
def test_missing_manifest(package, tmp_path, extract_dir):
    name = _metadata_name(package)
    metadata = json.loads(package[name])
    del metadata["tdaot.manifest"]
    package[name] = json.dumps(metadata).encode()
    path = _write(tmp_path / "plain.pt2", package)
    _refused(path, extract_dir, tdaot.ManifestError, "has no 'tdaot.manifest' metadata")


def test_manifest_from_another_package(package, nested, tmp_path, extract_dir):
    other = _manifest(_records(nested[2].path))
    _set_manifest(package, other)
    path = _write(tmp_path / "swapped.pt2", package)
    _refused(
        path,
        extract_dir,
        tdaot.IntegrityError,
        "holds a file 'data/aotinductor/model/.*' that its manifest does not list",
    )


def test_version_1_packages_are_refused_with_a_rebuild_hint(package, tmp_path, extract_dir):
    manifest = _manifest(package)
    manifest["schema_version"] = 1
    del manifest["files"]
    _set_manifest(package, manifest)
    path = _write(tmp_path / "old.pt2", package)
    _refused(path, extract_dir, tdaot.ManifestError, "version 1 packages carry no file digests.*rebuild")


# A package built by torch 1.13 is refused naming it and this runtime's torch major.minor.
_OTHER_TORCH = r"1\.13.*" + re.escape(".".join(torch.__version__.split(".")[:2]))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("cpu_isa", "avx512 amx_int8 sme", "sme"),
        ("torch_version", "1.13.1", _OTHER_TORCH),
    ],
    ids=["another-cpu-isa", "another-torch"],
)
def test_packages_built_for_another_host(package, tmp_path, extract_dir, field, value, message):
    manifest = _manifest(package)
    manifest[field] = value
    _set_manifest(package, manifest)
    path = _write(tmp_path / "elsewhere.pt2", package)
    _refused(path, extract_dir, tdaot.HostMismatchError, message, verify=False)
    assert tdaot.verify_package(path)  # verify checks integrity only: a CI host may build for robots


# --- manifest faults (the metadata JSON carries no digest, so these reach the parser) -----
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
        _OTHER_TORCH,
        id="torch-version",
    ),
]


@pytest.mark.parametrize(("edit", "error", "message"), MANIFEST_FAULTS)
def test_bad_manifest_is_refused_naming_the_package(tutorial, tmp_path, extract_dir, edit, error, message):
    path = tmp_path / "edited.pt2"
    _rewrite_manifest(tutorial[2].path, path, edit)
    _refused(path, extract_dir, error, message, verify=error is not tdaot.HostMismatchError)


def test_cuda_package_on_a_host_without_cuda_is_refused(tutorial, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    path = tmp_path / "cuda.pt2"
    _rewrite_manifest(tutorial[2].path, path, _edit_manifest(lambda m: m.update(device="cuda")))
    with pytest.raises(tdaot.HostMismatchError, match="cuda"):
        tdaot.load(path)


def test_python_reader_refuses_the_same_packages(tmp_path):
    path = tmp_path / "x.pt2"
    path.write_bytes(Path(__file__).read_bytes())
    with pytest.raises(tdaot.PackageError, match="not a .pt2 package"):
        tdaot.read_manifest(path)


# --- tampered files ---------------------------------------------------------------------------
def test_a_modified_library_is_refused_before_it_is_loaded(package, tmp_path, extract_dir):
    library = _library_name(package)
    data = bytearray(package[library])
    data[len(data) // 2] ^= 0xFF
    package[library] = bytes(data)
    path = _write(tmp_path / "tampered.pt2", package)
    _refused(
        path,
        extract_dir,
        tdaot.IntegrityError,
        f"file '{library}' has sha256 {hashlib.sha256(data).hexdigest()}, but the manifest records",
    )


def test_an_added_or_removed_file_is_refused(package, tmp_path, extract_dir):
    added = dict(package, **{MODEL_DIR + "extra.so": b"\x7fELF"})
    path = _write(tmp_path / "added.pt2", added)
    _refused(path, extract_dir, tdaot.IntegrityError, f"holds a file '{MODEL_DIR}extra.so' that its manifest")
    cpp = next(n for n in package if n.endswith(".kernel.cpp"))
    path = _write(tmp_path / "removed.pt2", {n: d for n, d in package.items() if n != cpp})
    _refused(path, extract_dir, tdaot.IntegrityError, f"lacks the file '{cpp}' that its manifest lists")


def test_a_consistent_package_aoti_cannot_load_leaves_nothing(package, tmp_path, extract_dir):
    # Digests match (resealed), so extraction completes; then the library is no ELF file.
    package[_library_name(package)] = b"not a shared library"
    _reseal(package)
    path = _write(tmp_path / "resealed.pt2", package)
    with pytest.raises(tdaot.PackageError, match="could not be loaded by AOTInductor"):
        _load(path, extract_dir)
    assert tdaot.verify_package(path)  # the digests themselves are fine


def test_an_unusable_temp_dir_is_named(tutorial, tmp_path):
    missing = tmp_path / "no" / "such" / "dir"
    message = f"no temporary directory could be created under '{missing}'"
    with pytest.raises(tdaot.PackageError, match=message):
        tdaot.load(tutorial[2].path, temp_dir=missing)


def test_the_default_temp_dir_is_tmpdir_and_is_left_empty(package, tutorial, tmp_path, monkeypatch):
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmpdir))
    tdaot.load(tutorial[2].path)
    package[_library_name(package)] = b"not a shared library"
    _reseal(package)
    with pytest.raises(tdaot.PackageError, match="could not be loaded by AOTInductor"):
        tdaot.load(_write(tmp_path / "resealed.pt2", package))
    assert list(tmpdir.iterdir()) == []


# --- issue 38: a manifest's shapes and device key, refused by the core for every reader ---------


def test_a_shape_of_2_62_is_a_manifest_error_naming_the_key(package, tmp_path, extract_dir):
    """Was a c10 'Storage size calculation overflowed' (SIGABRT in tdaot-run, a plain
    RuntimeError here) with the extraction folder left in TMPDIR."""
    records = package
    manifest = _manifest(records)
    manifest["inputs"][0]["shape"] = [2**62]
    _set_manifest(records, manifest)
    path = _write(tmp_path / "huge.pt2", records)
    message = r"inputs\[0\]\.shape': 'observation' has shape \[B, 4611686018427387904\]: one sample"
    _refused(path, extract_dir, tdaot.ManifestError, message)


def test_a_cuda_device_key_under_a_cpu_manifest_is_refused_by_load_and_verify(package, tmp_path, extract_dir):
    records = package
    for name in [n for n in records if n.endswith("wrapper_metadata.json")]:
        metadata = json.loads(records[name])
        metadata["AOTI_DEVICE_KEY"] = "cuda"
        records[name] = json.dumps(metadata).encode()
    path = _write(tmp_path / "cuda_key.pt2", records)
    _refused(path, extract_dir, tdaot.ManifestError, r"names device 'cuda', but the manifest says 'cpu'")
