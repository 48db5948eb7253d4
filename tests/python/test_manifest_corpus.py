"""The manifest conformance corpus (tests/manifests/README.md) through tdaot.Manifest, which
reads every manifest with the C++ parser (tdaot._C); tests/cpp/test_manifest_corpus.cpp runs
the same files against that parser directly."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch

import tdaot
from tdaot import _C
from tdaot.manifest import DTYPES, Manifest, dtype_name

CORPUS = Path(__file__).resolve().parents[1] / "manifests"
VALID = sorted(CORPUS.glob("valid/*.json"))
INVALID = sorted(CORPUS.glob("invalid/*.json"))


def _is_utf8(path: Path) -> bool:
    try:
        path.read_bytes().decode()
    except UnicodeDecodeError:
        return False
    return True


# A Python str cannot hold bytes that are not UTF-8 (json_invalid_utf8): only C++ reads those.
INVALID_TEXT = [p for p in INVALID if _is_utf8(p)]
STUBS = Path(tdaot.__file__).with_name("_C.pyi")


def _sealed(path: Path) -> bool:
    return not path.stem.startswith("unsealed_")


def test_the_corpus_has_a_case_per_rule():
    assert len(VALID) >= 10 and len(VALID) + len(INVALID) >= 30
    for path in INVALID:
        assert path.with_suffix(".error").is_file(), f"{path.name} has no .error file"


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_valid_manifests_parse_and_round_trip(path):
    text = path.read_bytes().decode()
    manifest = Manifest.from_json(text, path.name, sealed=_sealed(path))
    again = Manifest.from_json(manifest.to_json(), path.name, sealed=_sealed(path))
    assert again == manifest
    assert again.extra == manifest.extra
    assert Manifest.from_json(manifest.to_json(indent=2), path.name, sealed=_sealed(path)) == manifest
    # Python's serialisation and the C++ normalisation say the same.
    normalised = _C.parse_manifest_json(text, path.name, sealed=_sealed(path))
    assert json.loads(normalised) == manifest.to_dict()
    assert Manifest.from_dict(manifest.to_dict(), sealed=_sealed(path)) == manifest
    assert manifest.validated(sealed=_sealed(path)) == manifest
    assert bool(manifest.files) == _sealed(path)


@pytest.mark.parametrize("path", INVALID_TEXT, ids=lambda p: p.stem)
def test_invalid_manifests_are_refused_naming_origin_and_field(path):
    expected = path.with_suffix(".error").read_text(encoding="utf-8").rstrip("\r\n")
    text = path.read_text(encoding="utf-8")
    message = re.escape(f"manifest of '{path.name}': {expected}")
    with pytest.raises(tdaot.ManifestError, match=message) as info:
        Manifest.from_json(text, path.name, sealed=_sealed(path))
    assert info.value.path == path.name


def test_extra_top_level_fields_are_kept():
    manifest = Manifest.from_json((CORPUS / "valid/extra_fields.json").read_text(encoding="utf-8"))
    assert manifest.extra["note"] == "built in CI"
    assert manifest.extra["deployment"]["rate_hz"] == 50.5
    assert manifest.to_dict()["deployment"] == manifest.extra["deployment"]
    # Unknown fields inside known objects are dropped.
    assert manifest.to_dict()["batch"] == {"min": 1, "max": 64}


def test_written_manifests_are_checked_by_the_cpp_parser():
    manifest = Manifest.from_json((CORPUS / "valid/recurrent_with_is_init.json").read_text(encoding="utf-8"))
    broken = dataclasses.replace(manifest, batch=tdaot.BatchRange(4, 2))
    with pytest.raises(tdaot.ManifestError, match=r"manifest of 'x': field 'batch': min 4 > max 2"):
        broken.validated(origin="x")
    unsealed = dataclasses.replace(manifest, files={})
    assert unsealed.validated(sealed=False) == unsealed
    with pytest.raises(tdaot.ManifestError, match="field 'files': missing"):
        unsealed.validated()
    with pytest.raises(tdaot.ManifestError, match="field 'files': present in an unsealed manifest"):
        manifest.validated(sealed=False)


def test_from_dict_refuses_what_json_cannot_hold():
    with pytest.raises(tdaot.ManifestError, match="manifest of 'd': not JSON data"):
        Manifest.from_dict({"schema_version": object()}, "d")


def test_a_dtype_a_package_cannot_carry_is_a_build_error():
    with pytest.raises(tdaot.BuildError, match=r"dtype torch.complex64 is not supported by tdaot") as info:
        dtype_name(torch.complex64)
    assert not isinstance(info.value, tdaot.ManifestError)


def test_python_and_cpp_agree_on_the_constants():
    assert list(DTYPES) == _C.manifest_dtype_names()
    assert tdaot.manifest.SCHEMA_VERSION == 2
    assert tdaot.manifest.METADATA_KEY == "tdaot.manifest"
    assert tdaot.manifest.digest_exempt("data/aotinductor/model/x_metadata.json")
    assert tdaot.manifest.digest_exempt(".data/version")
    assert not tdaot.manifest.digest_exempt("data/aotinductor/model/x.wrapper.so")


def test_every_public_name_of_the_extension_has_a_stub():
    tree = ast.parse(STUBS.read_text(encoding="utf-8"))
    stubbed: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            stubbed[node.name] = {
                n.name if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) else n.target.id
                for n in node.body
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                or (isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name))
            }
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            stubbed[node.name] = set()
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            stubbed[node.target.id] = set()
    public = {name for name in dir(_C) if not name.startswith("_")}
    assert public == set(stubbed), "tdaot/_C.pyi differs from tdaot._C"
    for name in public:
        value = getattr(_C, name)
        if isinstance(value, type):
            members = {m for m in vars(value) if not m.startswith("_")} | {"__init__"}
            assert members == stubbed[name] | {"__init__"}, f"stubs of _C.{name} differ"
