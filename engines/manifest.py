"""The engine bundle's ``manifest.json``: what each artifact is, where it came from, its checksum.

Artifacts are addressed by a logical name (``llm/qwen-1.5b``, ``asr/whisper-base/ct2``) so that
engines never hard-code file paths inside the bundle.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engines.errors import BundleError
from engines.files import atomic_write

MANIFEST_NAME = "manifest.json"
FORMAT_VERSION = 1
_CHUNK_BYTES = 4 * 1024 * 1024
MAX_MANIFEST_BYTES = 1024 * 1024  # a real one is a few KiB; a larger one is not read at all
MAX_ARTIFACTS = 256


@dataclass(frozen=True)
class Artifact:
    name: str
    path: str  # relative to the bundle folder, POSIX separators
    kind: str
    sha256: str
    size_bytes: int
    source: dict[str, str] = field(default_factory=dict)
    build: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Artifact:
        try:
            check_relative(str(data["path"]))
            return cls(
                name=str(data["name"]),
                path=str(data["path"]),
                kind=str(data["kind"]),
                sha256=str(data["sha256"]),
                size_bytes=int(data["size_bytes"]),
                source=dict(data.get("source", {})),
                build=dict(data.get("build", {})),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise BundleError(f"manifest entry is malformed: {data!r:.200} ({err})") from err


def check_relative(path: str) -> None:
    """An artifact's path stays inside its bundle folder: relative, POSIX, no ``..``. Raises ValueError."""
    parts = path.split("/")
    if not path or path.startswith("/") or "\\" in path or ":" in parts[0] or ".." in parts or "\0" in path:
        raise ValueError(f"unsafe path {path[:80]!r}: not a relative path inside the bundle")


def inside(root: Path, path: Path) -> bool:
    """``path``, every link followed, is within ``root`` (itself resolved)."""
    try:
        return path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):  # a link loop
        return False


@dataclass(frozen=True)
class Problem:
    name: str
    path: str
    what: str

    def __str__(self) -> str:
        return f"{self.name} ({self.path}): {self.what}"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


class Manifest:
    def __init__(self, artifacts: list[Artifact] | None = None, meta: dict[str, Any] | None = None) -> None:
        self.artifacts: dict[str, Artifact] = {a.name: a for a in artifacts or []}
        self.meta: dict[str, Any] = dict(meta or {})

    @classmethod
    def read(cls, bundle_dir: Path) -> Manifest:
        path = bundle_dir / MANIFEST_NAME
        if not path.is_file():
            raise BundleError(
                f"no {MANIFEST_NAME} in {bundle_dir}",
                fix=f"build the bundle: python -m build_scripts bundle --out {bundle_dir}",
            )
        try:
            size = path.stat().st_size
            if size > MAX_MANIFEST_BYTES:
                raise BundleError(
                    f"{path} is {size} bytes; a manifest is at most {MAX_MANIFEST_BYTES} (this is not a bundle's)",
                    fix=f"rebuild the bundle: python -m build_scripts bundle --out {bundle_dir}",
                )
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise BundleError(
                f"{path} is not readable JSON: {err}",
                fix=f"rebuild the bundle: python -m build_scripts bundle --out {bundle_dir}",
            ) from err
        if not isinstance(data, dict) or data.get("format") != FORMAT_VERSION:
            raise BundleError(f"{path} has an unknown format (expected format {FORMAT_VERSION})")
        entries = data.get("artifacts", [])
        if not isinstance(entries, list) or len(entries) > MAX_ARTIFACTS:
            raise BundleError(f"{path}: 'artifacts' must be a list of at most {MAX_ARTIFACTS}")
        if not isinstance(data.get("meta", {}), dict):
            raise BundleError(f"{path}: 'meta' must be an object")
        return cls([Artifact.from_dict(e) for e in entries], data.get("meta", {}))

    def write(self, bundle_dir: Path) -> Path:
        """Write atomically, so an interrupted build never leaves half a manifest."""
        payload = {
            "format": FORMAT_VERSION,
            "meta": self.meta,
            "artifacts": [asdict(a) for a in sorted(self.artifacts.values(), key=lambda a: a.name)],
        }
        target = bundle_dir / MANIFEST_NAME
        atomic_write(target, json.dumps(payload, indent=2) + "\n")
        return target

    def add(self, artifact: Artifact) -> None:
        self.artifacts[artifact.name] = artifact

    def get(self, name: str) -> Artifact | None:
        return self.artifacts.get(name)

    def verify(self, bundle_dir: Path, *, full: bool = True) -> list[Problem]:
        """Every missing or altered file; ``full=False`` checks presence and size only."""
        problems: list[Problem] = []
        for art in sorted(self.artifacts.values(), key=lambda a: a.name):
            problems.extend(self.verify_one(bundle_dir, art, full=full))
        return problems

    @staticmethod
    def verify_one(bundle_dir: Path, art: Artifact, *, full: bool = True) -> list[Problem]:
        path = bundle_dir / art.path
        if not inside(bundle_dir, path):
            return [Problem(art.name, art.path, "reaches outside the bundle folder (a link or ..)")]
        if not path.is_file():
            return [Problem(art.name, art.path, "missing")]
        size = path.stat().st_size
        if size != art.size_bytes:
            return [Problem(art.name, art.path, f"size {size} bytes, expected {art.size_bytes}")]
        if full and sha256_of(path) != art.sha256:
            return [Problem(art.name, art.path, "content altered (sha256 mismatch)")]
        return []
