"""Ed25519 signing keys and signatures, made with the ``cryptography`` package.

A signature entry is ``{"key_id": sha256 of the raw public key (hex), "alg": "ed25519",
"signature": base64}``; a signed file carries a JSON list of them, so several keys can sign it
(:func:`sign_message` signs any bytes, for any file format). A package's signatures sign its
manifest bytes (the manifest JSON exactly as the package stores it, which holds every file's
sha256) and live in its ``tdaot.sig`` entry, which the manifest does not list; a weight file's
sign its signing payload (``tdaot.builder.weights_format.signing_payload``: its format, base
package and digests) and live in its ``tdaot.signatures`` metadata entry, which that payload
leaves out. :func:`sign` adds or replaces one key's signature there and changes nothing else. Verifying is
the runtime's (C++, libsodium): ``tdaot.load(path, trusted_keys=[...])``, ``tdaot.verify_package``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import stat
import tempfile
import zipfile
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from tdaot import _C
from tdaot.errors import SignatureError

ALGORITHM = "ed25519"
PRIVATE_KEY_FILE = "private.pem"
PUBLIC_KEY_FILE = "public.pem"
SIGNATURE_ENTRY = _C.SIGNATURE_ENTRY

Key = str | bytes | os.PathLike | Ed25519PrivateKey


def keygen(out_dir: str | os.PathLike) -> tuple[Path, Path]:
    """Writes a new Ed25519 key pair into ``out_dir`` (created if needed): ``private.pem``
    (PKCS#8, unencrypted, mode 0600: keep it on the signing machine) and ``public.pem`` (what
    services trust). Refuses to overwrite an existing key. Returns (private, public) paths."""
    out = Path(out_dir)
    private_path, public_path = out / PRIVATE_KEY_FILE, out / PUBLIC_KEY_FILE
    for path in (private_path, public_path):
        if os.path.lexists(path):
            raise SignatureError(
                f"key file '{path}' exists; refusing to overwrite a key (packages signed with it "
                "would no longer verify against a new one): choose another directory",
                str(path),
            )
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    try:
        out.mkdir(parents=True, exist_ok=True)
        _write_new(private_path, private_pem, 0o600)
        _write_new(public_path, public_pem(key).encode(), 0o644)
    except OSError as err:
        raise SignatureError(f"cannot write a key pair into '{out}': {err.strerror}", str(out)) from None
    return private_path, public_path


def _write_new(path: Path, data: bytes, mode: int) -> None:
    # O_EXCL: never through a file or link that appeared meanwhile; fchmod: whatever the umask.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    with os.fdopen(fd, "wb") as file:
        os.fchmod(fd, mode)
        file.write(data)


def load_private_key(key: Key, *, what: str = "") -> Ed25519PrivateKey:
    """The Ed25519 private key in ``key``: a PEM text (str or bytes), the path of a PEM file, or
    a key object. Raises :class:`tdaot.SignatureError` naming the key file (``what`` is the
    error's path, e.g. the package being signed)."""
    if isinstance(key, Ed25519PrivateKey):
        return key
    pem, origin = _pem(key, what)
    if b"-----BEGIN PUBLIC KEY-----" in pem:
        raise SignatureError(
            f"{origin} holds a public key; signing needs the private key ({PRIVATE_KEY_FILE} from "
            "tdaot keygen)",
            what or origin,
        )
    try:
        loaded = serialization.load_pem_private_key(pem, password=None)
    except TypeError:
        raise SignatureError(
            f"{origin} is encrypted; tdaot signs with an unencrypted PKCS#8 key (tdaot keygen)",
            what or origin,
        ) from None
    except (ValueError, UnsupportedAlgorithm) as err:
        raise SignatureError(f"{origin} is not a PEM private key: {err}", what or origin) from None
    if not isinstance(loaded, Ed25519PrivateKey):
        raise SignatureError(
            f"{origin} is not an Ed25519 key (it is a {type(loaded).__name__}); tdaot signatures are "
            "Ed25519 (tdaot keygen makes a key pair)",
            what or origin,
        )
    return loaded


def _pem(key: str | bytes | os.PathLike, what: str) -> tuple[bytes, str]:
    """(PEM bytes, how messages name the key)."""
    if isinstance(key, bytes):
        return key, "the signing key (PEM text)"
    if isinstance(key, str) and "-----BEGIN" in key:
        return key.encode(), "the signing key (PEM text)"
    path = os.fspath(key)
    origin = f"signing key file '{path}'"
    try:
        if os.path.getsize(path) > 64 << 10:
            raise SignatureError(f"{origin} is too large to be a PEM key", what or path)
        return Path(path).read_bytes(), origin
    except FileNotFoundError:
        raise SignatureError(f"{origin} does not exist", what or path) from None
    except OSError as err:
        raise SignatureError(f"{origin} cannot be read: {err.strerror}", what or path) from None


def public_pem(key: Key) -> str:
    """The public key of a private key, as PEM text (what ``trusted_keys`` takes)."""
    public = load_private_key(key).public_key()
    return public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


def key_id(key: Key | Ed25519PublicKey) -> str:
    """The id signatures name a key by: the sha256 of its raw 32-byte public key, in hex."""
    public = key if isinstance(key, Ed25519PublicKey) else load_private_key(key).public_key()
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def sign_message(message: bytes, key: Key) -> dict[str, str]:
    """One signature entry over ``message`` by ``key`` (see the module's docstring)."""
    private = load_private_key(key)
    return {
        "key_id": key_id(private.public_key()),
        "alg": ALGORITHM,
        "signature": base64.b64encode(private.sign(message)).decode(),
    }


def sign(path: str | os.PathLike, key: Key) -> str:
    """Signs the package or weight file at ``path`` (told apart by content: a .pt2 package or
    a .tdw of :func:`tdaot.export_weights`) with the private ``key`` (a PEM text or the path of
    a PEM file) and returns the key's id. The file must verify (a package's files match its
    manifest; a weight file's tensors match its digests); a signature by the same key is
    replaced, others are kept. The file is rewritten atomically and checked by the runtime with
    the key's public half before it replaces the original; its file sha256 changes (pin the
    signed file), what is signed does not. Anything else raises :class:`tdaot.PackageError`
    naming ``path``."""
    path = os.fspath(path)
    private = load_private_key(key, what=path)
    trusted = [public_pem(private)]
    if _C.file_kind(path) == "package":
        _C.verify_package(path)  # only what is intact gets signed
        entry = sign_message(_C.read_manifest_bytes(path), private)
        _replace_checked(
            path,
            lambda staged: _write_signed(path, staged, entry),
            lambda staged: _C.verify_package(staged, "", trusted),  # as a service will check it
        )
        return entry["key_id"]
    from tdaot.builder.weights_format import SIGNATURES_KEY, read_signatures, write_signatures

    _C.verify_weights(path)
    entry = sign_message(_C.weights_signing_payload(path), private)
    existing = _existing_signatures(read_signatures(path), path, "weight file", SIGNATURES_KEY)
    signatures = _with(existing, entry)
    _replace_checked(
        path,
        lambda staged: write_signatures(path, staged, signatures),
        lambda staged: _C.verify_weights(staged, trusted),
    )
    return entry["key_id"]


def _replace_checked(path: str, write, check) -> None:
    """Replaces ``path`` by what ``write(staged)`` writes beside it, once ``check(staged)`` passed."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, staged = tempfile.mkstemp(prefix=".tdaot-sign-", suffix=os.path.splitext(path)[1], dir=directory)
    os.close(fd)
    try:
        write(staged)
        shutil.copymode(path, staged)
        check(staged)
        os.replace(staged, path)
    finally:
        if os.path.exists(staged):
            os.unlink(staged)


def _with(signatures: list[dict], entry: dict[str, str]) -> list[dict]:
    """``signatures`` with ``entry`` added, replacing any earlier one by the same key."""
    return [s for s in signatures if s.get("key_id") != entry["key_id"]] + [entry]


def _write_signed(source: str, target: str, entry: dict[str, str]) -> None:
    """Copies every entry of ``source`` but its signatures, then the signatures with ``entry``."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w") as dst:
        infos = src.infolist()
        name = infos[0].filename.split("/", 1)[0] + "/" + SIGNATURE_ENTRY  # under the top folder
        signatures = []
        for info in infos:
            if info.filename == name:
                signatures = _existing_signatures(src.read(info), source, "package", SIGNATURE_ENTRY)
            else:
                dst.writestr(info, src.read(info))
        signatures = _with(signatures, entry)
        info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))  # reproducible bytes
        info.external_attr = (stat.S_IFREG | 0o644) << 16
        dst.writestr(info, json.dumps(signatures, indent=1).encode())


def _existing_signatures(data: bytes | str | None, path: str, what: str, entry: str) -> list[dict]:
    """The signatures already in ``what`` (``"package"``) ``path``'s ``entry`` (None: none)."""
    if data is None:
        return []
    try:
        signatures = json.loads(data)
    except ValueError as err:
        signatures = err
    if not isinstance(signatures, list) or not all(isinstance(s, dict) for s in signatures):
        raise SignatureError(
            f"{what} '{path}' has a malformed {entry} entry (expected a JSON list of "
            "signatures); refusing to sign over it",
            path,
        )
    return signatures
