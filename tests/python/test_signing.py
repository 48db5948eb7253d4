"""Signed packages: keys, signing (Python, `cryptography`), verification at load (C++, libsodium)
and every refusal with its message. A refused load is given an op library and a temp_dir that
do not exist: the SignatureError (not the PackageError those would cause) shows that the
signature is checked before any library is loaded or any file extracted."""

from __future__ import annotations

import base64
import json
import os
import shutil
import stat
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import ROOT  # noqa: F401 - puts examples/ on the path
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from examples.policies import tutorial_policy

import tdaot
from tdaot import _C
from tdaot.cli import main
from tdaot.signing import key_id, keygen, sign, sign_message

SIG = _C.SIGNATURE_ENTRY


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    root = tmp_path_factory.mktemp("keys")
    private, public = keygen(root / "a")
    other_private, other_public = keygen(root / "b")
    return SimpleNamespace(
        private=private, public=public, other_private=other_private, other_public=other_public
    )


@pytest.fixture(scope="module")
def signed(tutorial, keys, tmp_path_factory) -> Path:
    """A copy of the tutorial package signed with keys.private."""
    path = tmp_path_factory.mktemp("signed") / "signed.pt2"
    shutil.copyfile(tutorial[2].path, path)
    assert sign(path, keys.private) == key_id(keys.private)
    return path


def _copy(source, tmp_path, name="copy.pt2") -> Path:
    return Path(shutil.copyfile(source, tmp_path / name))


def _entries(path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}


def _signature_name(path) -> str:
    with zipfile.ZipFile(path) as archive:
        return archive.namelist()[0].split("/")[0] + "/" + SIG


def _signatures(path) -> list[dict]:
    return json.loads(_entries(path)[_signature_name(path)])


def _rewrite(source, target, edit) -> Path:
    """Copies a package entry by entry; ``edit(name, data)`` returns new data or None to drop it."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w") as dst:
        for info in src.infolist():
            data = edit(info.filename, src.read(info))
            if data is not None:
                dst.writestr(info, data)
    return Path(target)


def _refused(path, keys, message, tmp_path):
    with pytest.raises(tdaot.SignatureError, match=message) as info:
        tdaot.load(
            path,
            trusted_keys=keys,
            op_libraries=[tmp_path / "no_such_op_library.so"],
            temp_dir=tmp_path / "no" / "such" / "dir",
        )
    assert info.value.path == str(path)
    with pytest.raises(tdaot.SignatureError, match=message):
        tdaot.verify_package(path, trusted_keys=keys)


# --- keys -------------------------------------------------------------------------------------
def test_keygen_writes_a_private_and_a_public_pem_and_never_overwrites(tmp_path):
    private, public = keygen(tmp_path / "new" / "keys")
    assert (private.name, public.name) == ("private.pem", "public.pem")
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o600
    assert private.read_text().startswith("-----BEGIN PRIVATE KEY-----")
    assert public.read_text().startswith("-----BEGIN PUBLIC KEY-----")
    with pytest.raises(tdaot.SignatureError, match=f"key file '{private}' exists; refusing to overwrite"):
        keygen(tmp_path / "new" / "keys")


# --- signing ----------------------------------------------------------------------------------
def test_signing_adds_one_entry_and_changes_no_other(tutorial, signed):
    before, after = _entries(tutorial[2].path), _entries(signed)
    assert set(after) - set(before) == {_signature_name(signed)}
    assert all(after[name] == data for name, data in before.items())
    assert _C.read_manifest_bytes(str(signed)) == _C.read_manifest_bytes(tutorial[2].path)


def test_the_signature_verifies_in_python_and_in_cpp(signed, keys):
    [entry] = _signatures(signed)
    assert entry["alg"] == "ed25519" and entry["key_id"] == key_id(keys.private)
    message = _C.read_manifest_bytes(str(signed))
    # The signed bytes are the manifest JSON as every model's metadata stores it.
    metadata = next(data for name, data in _entries(signed).items() if name.endswith("wrapper_metadata.json"))
    assert json.loads(metadata)["tdaot.manifest"].encode() == message
    public = serialization.load_pem_public_key(keys.public.read_bytes())
    public.verify(base64.b64decode(entry["signature"]), message)  # raises when it does not verify
    native = tdaot.load(signed, trusted_keys=[keys.public])
    assert native.run_positional(torch.zeros(2, 3))[2].shape == (2, 2)
    assert tdaot.verify_package(signed, trusted_keys=[keys.other_public, keys.public]) == native.sha256


@pytest.mark.parametrize("form", [str, Path, lambda p: Path(p).read_text(), lambda p: Path(p).read_bytes()])
def test_trusted_keys_are_paths_or_pem_texts(signed, keys, form):
    assert tdaot.verify_package(signed, trusted_keys=[form(str(keys.public))])
    assert tdaot.verify_package(signed, trusted_keys=form(str(keys.public)))  # one key alone


def test_a_signed_package_loads_without_trusted_keys(signed):
    assert tdaot.load(signed).run_positional(torch.zeros(1, 3))[0].shape == (1, 2)


def test_signing_again_replaces_that_keys_signature_and_keeps_the_others(signed, keys, tmp_path):
    path = _copy(signed, tmp_path)
    sign(path, keys.other_private.read_text())  # a PEM text works as well as a path
    sign(path, keys.other_private)
    assert sorted(s["key_id"] for s in _signatures(path)) == sorted(
        [key_id(keys.private), key_id(keys.other_private)]
    )
    for public in (keys.public, keys.other_public):
        tdaot.load(path, trusted_keys=[public])


def test_signing_refuses_unusable_keys_and_tampered_packages(tutorial, keys, tmp_path):
    path = _copy(tutorial[2].path, tmp_path)
    (tmp_path / "garbage.pem").write_text("garbage")
    ec_key = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    cases = [
        (keys.public, f"signing key file '{keys.public}' holds a public key; signing needs the private key"),
        (tmp_path / "missing.pem", f"signing key file '{tmp_path / 'missing.pem'}' does not exist"),
        (tmp_path / "garbage.pem", "is not a PEM private key"),
        (
            ec_key,
            r"the signing key \(PEM text\) is not an Ed25519 key \(it is a .*\); tdaot signatures are",
        ),
    ]
    for key, message in cases:
        with pytest.raises(tdaot.SignatureError, match=message) as info:
            sign(path, key)
        assert info.value.path == str(path)
    library = next(n for n in _entries(path) if n.endswith(".so"))
    tampered = _rewrite(path, tmp_path / "tampered.pt2", lambda n, d: d[:-1] + b"!" if n == library else d)
    before = tampered.read_bytes()
    with pytest.raises(tdaot.IntegrityError, match="has sha256"):
        sign(tampered, keys.private)  # only an intact package gets signed
    assert tampered.read_bytes() == before
    assert _entries(path) == _entries(tutorial[2].path)


# --- refusals at load -------------------------------------------------------------------------
def test_an_unsigned_package_is_refused(tutorial, keys, tmp_path):
    _refused(
        tutorial[2].path,
        [keys.public],
        r"is not signed, but trusted keys are set \(trusted key ids: ",
        tmp_path,
    )


def test_a_removed_signature_entry_is_refused(signed, keys, tmp_path):
    path = _rewrite(signed, tmp_path / "stripped.pt2", lambda n, d: None if n.endswith(SIG) else d)
    _refused(path, [keys.public], "is not signed", tmp_path)


def test_a_signature_by_another_key_is_refused_naming_both(signed, keys, tmp_path):
    message = (
        rf"is signed only by keys that are not trusted \(key ids: {key_id(keys.private)}; "
        rf"trusted key ids: {key_id(keys.other_private)}\)"
    )
    _refused(signed, [keys.other_public], message, tmp_path)


def test_a_changed_manifest_is_refused(signed, keys, tmp_path):
    def edit(name, data):
        if not name.endswith("wrapper_metadata.json"):
            return data
        metadata = json.loads(data)
        manifest = json.loads(metadata["tdaot.manifest"])
        manifest["source"]["factory"] = "evil.py:policy"
        metadata["tdaot.manifest"] = json.dumps(manifest)
        return json.dumps(metadata).encode()

    path = _rewrite(signed, tmp_path / "edited.pt2", edit)
    message = (
        rf"has a signature by trusted key {key_id(keys.private)} \(trusted key file '{keys.public}'\) that "
        "does not match its manifest: the manifest was changed after it was signed"
    )
    _refused(path, [keys.public], message, tmp_path)
    assert tdaot.verify_package(path)  # self-consistent: only the signature tells


def test_a_changed_file_is_refused_by_its_digest(signed, keys, tmp_path):
    library = next(n for n in _entries(signed) if n.endswith(".so"))
    path = _rewrite(signed, tmp_path / "tampered.pt2", lambda n, d: d[:-1] + b"!" if n == library else d)
    with pytest.raises(tdaot.IntegrityError, match="has sha256 .* but the manifest records") as info:
        tdaot.load(path, trusted_keys=[keys.public])
    assert not isinstance(info.value, tdaot.SignatureError)  # the signature holds; the digest does not


def test_malformed_signatures_are_refused(signed, keys, tmp_path):
    for content, message in [
        (b"{not json", r"has malformed signatures \(not JSON"),
        (b"[{}]", r"has a malformed signature #1 \(no string 'key_id'"),
    ]:
        path = _rewrite(
            signed, tmp_path / "malformed.pt2", lambda n, d, c=content: c if n.endswith(SIG) else d
        )
        _refused(path, [keys.public], message, tmp_path)


def test_unusable_trusted_keys_are_named(signed, keys, tmp_path):
    (tmp_path / "garbage.pem").write_text("not a key\n")
    ec_public = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    cases = [
        (tmp_path / "missing.pem", f"trusted key file '{tmp_path / 'missing.pem'}' does not exist"),
        (tmp_path / "garbage.pem", r"is not a PEM public key \(no '-----BEGIN PUBLIC KEY-----' block\)"),
        (
            keys.private,
            rf"trusted key file '{keys.private}' holds a private key \('PRIVATE KEY'\); trusted keys",
        ),
        (ec_public, r"trusted key #1 \(PEM text\) is a id-ecPublicKey key; tdaot signatures are Ed25519"),
    ]
    for key, message in cases:
        _refused(signed, [key], message, tmp_path)


# --- command line -----------------------------------------------------------------------------
def test_keygen_sign_and_verify_commands(tutorial, tmp_path, capsys):
    assert main(["keygen", "--out", str(tmp_path / "keys")]) == 0
    assert "private key" in capsys.readouterr().out
    private, public = tmp_path / "keys" / "private.pem", tmp_path / "keys" / "public.pem"
    path = _copy(tutorial[2].path, tmp_path)
    assert main(["verify", str(path), "--public-key", str(public)]) == 1
    assert f"tdaot verify: SignatureError: package '{path}' is not signed" in capsys.readouterr().err
    assert main(["sign", str(path), "--key", str(private)]) == 0
    assert f"signed {path} with key {key_id(private)}" in capsys.readouterr().out
    assert main(["verify", str(path), "--public-key", str(public)]) == 0
    assert "signed by a trusted key" in capsys.readouterr().out
    assert main(["sign", str(path), "--key", str(public)]) == 1
    assert "holds a public key" in capsys.readouterr().err


def test_sign_messages_of_any_format(keys):
    entry = sign_message(b"weights header", keys.private)
    public = serialization.load_pem_public_key(keys.public.read_bytes())
    public.verify(base64.b64decode(entry["signature"]), b"weights header")


# --- the builder ------------------------------------------------------------------------------
def test_build_refuses_key_material_and_an_unusable_key_before_exporting(tmp_path):
    pem = "-----BEGIN PRIVATE KEY-----\nsecret\n-----END PRIVATE KEY-----\n"
    with pytest.raises(tdaot.BuildError, match="sign_key holds key material") as info:
        tdaot.BuildOptions(sign_key=pem)
    assert "secret" not in str(info.value)
    policy, example = tutorial_policy()
    missing = tmp_path / "missing.pem"
    with pytest.raises(tdaot.SignatureError, match=f"signing key file '{missing}' does not exist"):
        tdaot.build(policy, example, tmp_path / "policy.pt2", sign_key=missing)
    assert not (tmp_path / "policy.pt2").exists()
