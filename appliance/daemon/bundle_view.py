"""What the daemon says of its bundle and engines: the bundle summary the admin page and /api/status
show (bounded, whatever a manifest holds), the version a folder is, and the device tool's live state.
Used by the daemon's start and by a hot switch (``appliance.daemon.bundle_switch``) alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from appliance.admin.schemas import ArtifactSummary, BundleSummary
from appliance.pipeline.engines import SessionEngines
from engines.bundle import Bundle
from engines.bundle_store import VERSIONS, BundleStore, BundleVersion
from engines.errors import BundleError

MAX_META_VALUE_CHARS = 512  # a build's notes; a longer value is left out of the summary
MAX_META_KEYS = 32


def bounded_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """The manifest's meta as shown: at most MAX_META_KEYS keys, each value short as JSON."""
    shown: dict[str, Any] = {}
    for key, value in list(meta.items())[:MAX_META_KEYS]:
        try:
            text = json.dumps(value)
        except (TypeError, ValueError):
            continue
        if len(str(key)) <= 64 and len(text) <= MAX_META_VALUE_CHARS:
            shown[str(key)] = value
    return shown


def summarize_bundle(bundle: Bundle) -> BundleSummary:
    """The bundle as the admin page shows it, from the manifest the daemon opened."""
    artifacts = [
        ArtifactSummary(
            name=a.name,
            kind=a.kind,
            size_bytes=a.size_bytes,
            sha256_prefix=a.sha256[:12],
            source=bounded_meta(a.source),
        )
        for a in sorted(bundle.manifest.artifacts.values(), key=lambda a: a.name)
    ]
    version = bundle_version_of(bundle.root)
    return BundleSummary(
        path=str(bundle.root),
        version=None if version is None else version.id,
        label="" if version is None else version.label,
        artifacts=artifacts,
        total_bytes=sum(a.size_bytes for a in artifacts),
        meta=bounded_meta(bundle.manifest.meta),
    )


def device_status(engines: SessionEngines) -> dict[str, object]:
    """What the device tool adds to the clock: the engines are up, and how busy the LLM is."""
    now = engines.llm.occupancy()
    return {
        "engines": "all loaded and running",
        "conversations being answered": f"{now.running} of {now.slots}",
        "replies waiting": now.waiting,
    }


def bundle_version_of(folder: Path) -> BundleVersion | None:
    """The version ``folder`` is, when it lies in a root that keeps versions."""
    if folder.parent.name != VERSIONS:
        return None
    try:
        return BundleStore(folder.parent.parent).get(folder.name)
    except BundleError:
        return None
