"""Which native code stored in an archive may run: the trust decision and the seal that backs it.

An archive's native code (``data/native/<model>/<triple>/``) is foreign machine code. By default a
loaded program ignores it and compiles from its validated exported program through the local
compile cache. Stored code runs only when the caller trusts it (docs/deployment.md, "Trust"):

- ``load(..., trust_native_code=True)`` / ``load_pt2(...)``, the CLI's ``--trust-native-code``, or
  ``TENSORPLAY_TRUST_NATIVE_CODE=1`` in the environment: every entry is trusted;
- ``trusted_keys=[path, ...]``, the CLI's ``--trusted-key FILE``, or ``TENSORPLAY_TRUSTED_KEYS``
  (paths separated by ``os.pathsep``): entries carrying a valid HMAC-SHA256 signature by one of these
  keys are trusted (``tensorplay compile --sign-key FILE`` signs).

Every entry carries a *seal* (``seal.json``): the sha256 of its files (manifest, object code with the
stored signature, kernels, dialect text), optionally signed. Trusted code is used only if its seal
holds; the loader then checks more (:func:`tensorplay.lowering.api.check_native_code`).

>>> files = {"manifest.json": b"{}", "artifact.bin": b"TPNATIV1..."}
>>> key = b"0123456789abcdef0123456789abcdef"
>>> seal = make_seal(files, key)
>>> sorted(seal), verify_seal(files, seal, "doc/") is None
(['format', 'hmac_sha256', 'key_id', 'sha256'], True)
>>> signer_key(seal, [key]) == key
True
"""
from __future__ import annotations

import hashlib
import hmac
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["KEYS_ENV", "NATIVE_FILES", "SEAL_FILE", "SEAL_FORMAT", "TRUST_ENV", "Trust", "make_seal", "read_key",
           "seal_digest", "signer_key", "verify_seal"]

TRUST_ENV = "TENSORPLAY_TRUST_NATIVE_CODE"
KEYS_ENV = "TENSORPLAY_TRUSTED_KEYS"
SEAL_FILE = "seal.json"
SEAL_FORMAT = "tensorplay.native.seal.v1"
#: The files of one native entry the seal covers, in digest order (a missing file counts as absent).
NATIVE_FILES = ("manifest.json", "artifact.bin", "kernels.tpo", "program.tp")
MIN_KEY_BYTES = 16
MAX_KEY_BYTES = 4096


def seal_digest(files: Mapping[str, bytes | None]) -> str:
    """Hex sha256 over every native file (name, presence, length, bytes) in :data:`NATIVE_FILES` order."""
    h = hashlib.sha256(SEAL_FORMAT.encode())
    for name in NATIVE_FILES:
        data = files.get(name)
        h.update(name.encode() + (b"\0" if data is None else b"\1"))
        if data is not None:
            h.update(len(data).to_bytes(8, "little") + bytes(data))
    return h.hexdigest()


def _key_id(key: bytes) -> str:
    return hashlib.sha256(b"tensorplay key id\0" + key).hexdigest()[:16]


def make_seal(files: Mapping[str, bytes | None], key: bytes | None = None) -> dict[str, str]:
    """The ``seal.json`` record of an entry's files: their digest, and its HMAC-SHA256 under ``key`` if given."""
    seal = {"format": SEAL_FORMAT, "sha256": seal_digest(files)}
    if key is not None:
        seal["key_id"] = _key_id(key)
        seal["hmac_sha256"] = hmac.new(key, seal["sha256"].encode(), hashlib.sha256).hexdigest()
    return seal


def verify_seal(files: Mapping[str, bytes | None], seal: Any, where: str) -> None:
    """ValueError unless ``seal`` is a well-formed seal whose digest matches ``files`` (a changed byte anywhere
    in the object, kernels, manifest, stored signature or dialect text)."""
    hexes = ("sha256", "hmac_sha256", "key_id")
    if not isinstance(seal, dict) or seal.get("format") != SEAL_FORMAT or not set(seal) <= {"format", *hexes} \
            or not all(isinstance(seal.get(k, ""), str) and len(seal.get(k, "")) <= 64 for k in hexes) \
            or ("hmac_sha256" in seal) != ("key_id" in seal):
        raise ValueError(f"{where}{SEAL_FILE}: expected {{format: {SEAL_FORMAT!r}, sha256[, key_id, hmac_sha256]}}")
    if not hmac.compare_digest(seal["sha256"], seal_digest(files)):
        raise ValueError(f"{where}: the native code does not match its seal (a stored file was changed or damaged)")


def signer_key(seal: Mapping[str, str], keys: Iterable[bytes]) -> bytes | None:
    """The key of ``keys`` that signed ``seal`` (None when it is unsigned or signed by another key); ValueError
    when the seal names one of ``keys`` but its signature does not verify (a forged or tampered seal)."""
    if "hmac_sha256" not in seal:
        return None
    for key in keys:
        if hmac.compare_digest(seal["key_id"], _key_id(key)):
            want = hmac.new(key, seal["sha256"].encode(), hashlib.sha256).hexdigest()
            if not hmac.compare_digest(seal["hmac_sha256"], want):
                raise ValueError("the native code's signature does not verify under the trusted key it names "
                                 f"({seal['key_id']}): the seal was forged or tampered with")
            return key
    return None


def read_key(path: str | os.PathLike[str]) -> bytes:
    """The signing key in file ``path`` (its bytes, surrounding whitespace removed); ValueError for a missing,
    non-regular, too short or too long file."""
    path = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise ValueError(f"cannot read key file {path!r}: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"key file {path!r} is not a regular file")
        data = os.read(fd, MAX_KEY_BYTES + 1)
    finally:
        os.close(fd)
    key = data.strip()
    if not MIN_KEY_BYTES <= len(key) <= MAX_KEY_BYTES or len(data) > MAX_KEY_BYTES:
        raise ValueError(f"key file {path!r} must hold {MIN_KEY_BYTES} to {MAX_KEY_BYTES} bytes "
                         f"(e.g. `head -c 32 /dev/urandom > key`), got {len(key)}")
    return key


@dataclass(frozen=True)
class Trust:
    """What a loader trusts: all stored native code (``everything``) or code signed by one of ``keys``."""

    everything: bool = False
    keys: tuple[bytes, ...] = ()

    @classmethod
    def resolve(cls, trust_native_code: bool | None = None,
                trusted_keys: Iterable[str | os.PathLike[str] | bytes] | None = None) -> Trust:
        """The loader's arguments, else the environment: ``TENSORPLAY_TRUST_NATIVE_CODE=1`` and the key files in
        ``TENSORPLAY_TRUSTED_KEYS``. Keys are paths of key files (or the key bytes themselves).

        >>> Trust.resolve(False).everything, Trust.resolve(True).everything
        (False, True)
        """
        if trust_native_code is None:
            raw = os.environ.get(TRUST_ENV, "").strip()
            if raw not in ("", "0", "1"):
                raise ValueError(f"{TRUST_ENV} must be 0 or 1, got {raw!r}")
            trust_native_code = raw == "1"
        elif not isinstance(trust_native_code, bool):
            raise TypeError(f"trust_native_code must be a bool, got {type(trust_native_code).__name__}")
        if trusted_keys is None:
            trusted_keys = [p for p in os.environ.get(KEYS_ENV, "").split(os.pathsep) if p.strip()]
        elif isinstance(trusted_keys, str | bytes | os.PathLike):
            raise TypeError("trusted_keys must be a list of key files (or keys), not a single one")
        keys = tuple(k if isinstance(k, bytes) else read_key(k) for k in trusted_keys)
        if any(len(k) < MIN_KEY_BYTES for k in keys):
            raise ValueError(f"a trusted key must be at least {MIN_KEY_BYTES} bytes")
        return cls(trust_native_code, keys)

    def trusts(self, seal: Mapping[str, str]) -> bool:
        """Whether code under (a verified) ``seal`` may run: everything is trusted, or a trusted key signed it."""
        return self.everything or signer_key(seal, self.keys) is not None
