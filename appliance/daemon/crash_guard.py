"""A bundle version that keeps bringing the daemon down is rolled back, as one that cannot load is.

Each start of the daemon is written to ``starts.json`` in a versioned bundle root (the version it
runs, when, its process id) before the engines load, and taken out again when the daemon exits
cleanly. What is left are the starts that ended in a crash, a kill by the systemd watchdog or a failed
exit. When the active version has ``bundle.rollback_after_crashes`` of them within
``bundle.crash_window_min``, the next start rolls back to the previous version, unless that one
is crashing as well (then neither is the cause, and the two are not swapped back and forth).

systemd restarts the daemon after each of those ends (Restart=on-failure, StartLimitBurst=5 in
600 s in appliance.service): a limit of 3 leaves the rollback a start to happen in.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engines.bundle_store import BundleStore
from engines.errors import BundleError
from engines.files import atomic_write

if TYPE_CHECKING:
    from appliance.config import BundleParams

log = logging.getLogger(__name__)

STARTS = "starts.json"
_KEPT_S = 24 * 3600.0  # starts older than a day are dropped from the file whatever the window


@dataclass(frozen=True)
class CrashRollback:
    failed: str
    to: str
    notice: str


@dataclass(frozen=True)
class CrashGuard:
    store: BundleStore
    limit: int  # 0: never roll back for crashes
    window_s: float

    @classmethod
    def of(cls, bundle: BundleParams) -> CrashGuard:
        return cls(BundleStore(bundle.dir), bundle.rollback_after_crashes, bundle.crash_window_min * 60.0)

    @property
    def path(self) -> Path:
        return self.store.root / STARTS

    def unclean_starts(self, version: str, now: float | None = None) -> int:
        since = (time.time() if now is None else now) - self.window_s
        return sum(1 for s in self._starts() if s.get("version") == version and s.get("at", 0) >= since)

    def check(self) -> CrashRollback | None:
        """Before the engines load: roll back when the active version is crashing and the previous
        one is not."""
        if self.limit <= 0 or not self.store.versioned:
            return None
        try:
            state = self.store.state()
            if state.active is None or state.previous is None:
                return None
            crashes = self.unclean_starts(state.active)
            if crashes < self.limit or self.unclean_starts(state.previous) >= self.limit:
                return None
            self.store.rollback()
        except (BundleError, OSError) as err:
            log.warning("crash rollback: cannot read or change %s: %s", self.store.root, err)
            return None
        notice = (
            f"the engine bundle version {state.active} brought the daemon down {crashes} times within "
            f"{self.window_s / 60:g} min (crashes or missed watchdog pings; the journal has each); rolled "
            f"back to version {state.previous} (appliance bundle list shows both)"
        )
        log.error("%s", notice)
        return CrashRollback(state.active, state.previous, notice)

    def started(self) -> None:
        """This process starts on the active version (written before its engines load)."""
        if not self.store.versioned:
            return
        try:
            active = self.store.state().active
        except BundleError:
            return
        if active is None:
            return
        now = time.time()
        kept = [s for s in self._starts() if s.get("at", 0) >= now - _KEPT_S]
        self._write([*kept, {"version": active, "at": now, "pid": os.getpid()}])

    def now_running(self, version: str) -> None:
        """This process switched to ``version`` while running: a crash from now on is that version's."""
        if not self.path.is_file():
            return
        pid = os.getpid()
        self._write([{**s, "version": version} if s.get("pid") == pid else s for s in self._starts()])

    def ended_cleanly(self) -> None:
        """This process stops as asked: its starts do not count."""
        if not self.path.is_file():
            return
        pid = os.getpid()
        self._write([s for s in self._starts() if s.get("pid") != pid])

    def _starts(self) -> list[dict[str, Any]]:
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if isinstance(data, dict) and isinstance(data.get("starts"), list):
                return [s for s in data["starts"] if isinstance(s, dict)]
        return []  # missing or damaged: no crash is known, which only delays a rollback

    def _write(self, starts: list[dict[str, Any]]) -> None:
        try:
            atomic_write(self.path, json.dumps({"starts": starts}, indent=1) + "\n")
        except OSError as err:
            log.warning("crash rollback: cannot write %s: %s", self.path, err)
