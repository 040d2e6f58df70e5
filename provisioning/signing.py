"""Ed25519 signatures over a bundle's ``manifest.json``.

The factory signs the exact bytes of ``manifest.json`` with its private key (``sign-bundle``); the
signature sits next to it as ``manifest.json.sig`` (base64). The device holds only the public key
(``/etc/appliance/bundle-signing.pub``, installed with the OS image). Because the manifest lists every
file's sha256, a valid signature plus matching checksums proves every byte of the bundle.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from engines.manifest import MANIFEST_NAME
from provisioning.files import atomic_write_bytes, atomic_write_text

SIGNATURE_NAME = MANIFEST_NAME + ".sig"
# On the device: the manifest exactly as signed. manifest.json itself grows when the device records
# the TensorRT plans it built, so the signature is checked against this copy.
SIGNED_MANIFEST_NAME = MANIFEST_NAME + ".signed"
SIGNATURE_BYTES = 64


class SignatureError(Exception):
    """A bundle whose signature is missing, malformed or does not match; the message names the fix."""


def generate_keypair(private_path: Path, public_path: Path) -> None:
    """Write a new private key (PEM, mode 0600) and its public key (PEM, for the devices)."""
    if private_path.exists():
        raise FileExistsError(f"{private_path} exists; refusing to overwrite a signing key")
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    atomic_write_bytes(private_path, private_pem, mode=0o600)
    atomic_write_bytes(public_path, public_pem, mode=0o644)


def load_private_key(path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as err:
        raise SignatureError(f"cannot read the private signing key {path}: {err}") from err
    if not isinstance(key, Ed25519PrivateKey):
        raise SignatureError(
            f"{path} is not an Ed25519 private key (make one with: python -m provisioning keygen)"
        )
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    try:
        data = path.read_bytes()
    except FileNotFoundError as err:
        raise SignatureError(
            f"no bundle signing key installed at {path}; copy the factory's public key there "
            "(the .pub file made by `python -m provisioning keygen`) or pass --trusted-key FILE"
        ) from err
    except OSError as err:
        raise SignatureError(f"cannot read the bundle signing key {path}: {err}") from err
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError as err:
        raise SignatureError(f"{path} is not a PEM public key: {err}") from err
    if not isinstance(key, Ed25519PublicKey):
        raise SignatureError(f"{path} is not an Ed25519 public key")
    return key


def public_key_fingerprint(key: Ed25519PublicKey) -> str:
    """How a technician compares keys: the sha256 of the raw public key, shortened."""
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "sha256:" + hashlib.sha256(raw).hexdigest()[:32]


def sign_bundle(bundle_dir: Path, private_key: Path, *, out: Path | None = None) -> Path:
    """Sign ``bundle_dir/manifest.json``; returns the signature file (``out``, or next to it)."""
    manifest = bundle_dir / MANIFEST_NAME
    if not manifest.is_file():
        raise SignatureError(f"no {MANIFEST_NAME} in {bundle_dir}; build the bundle first")
    signature = load_private_key(private_key).sign(manifest.read_bytes())
    target = out or bundle_dir / SIGNATURE_NAME
    atomic_write_text(target, base64.b64encode(signature).decode("ascii") + "\n")
    return target


def read_signature(path: Path) -> bytes:
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError as err:
        raise SignatureError(
            f"the bundle is not signed: {path} is missing; sign it at the factory with "
            "`python -m provisioning sign-bundle --key PRIVATE.pem DIR`"
        ) from err
    except (OSError, UnicodeDecodeError) as err:
        raise SignatureError(f"cannot read the bundle signature {path}: {err}") from err
    try:
        signature = base64.b64decode(text, validate=True)
    except binascii.Error as err:
        raise SignatureError(f"{path} is not a base64 signature: {err}") from err
    if len(signature) != SIGNATURE_BYTES:
        raise SignatureError(
            f"{path} holds {len(signature)} bytes, not a {SIGNATURE_BYTES}-byte Ed25519 signature"
        )
    return signature


def signed_manifest_bytes(bundle_dir: Path) -> bytes:
    """The manifest as signed, from an installed bundle (or from media, where it is manifest.json)."""
    signed = bundle_dir / SIGNED_MANIFEST_NAME
    return (signed if signed.is_file() else bundle_dir / MANIFEST_NAME).read_bytes()


def verify_manifest_bytes(manifest_bytes: bytes, signature: bytes, public_key: Ed25519PublicKey) -> None:
    """Raise SignatureError unless ``signature`` is the trusted key's signature of these bytes."""
    try:
        public_key.verify(signature, manifest_bytes)
    except InvalidSignature as err:
        raise SignatureError(
            "the bundle's signature does not match its manifest.json: the manifest was edited after "
            "signing, or it was signed with a key this device does not trust; get an untouched copy of "
            "the signed bundle from the factory"
        ) from err
