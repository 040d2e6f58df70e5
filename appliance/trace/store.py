"""A bounded SQLite store of turn traces that survives restarts.

All access goes through one connection; callers on the event loop use ``TraceStore.add_async`` which
runs the write on the store's own thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from appliance.trace.owner import claim, release
from appliance.trace.record import TurnTrace
from appliance.trace.stats import StageSummary, summarize

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS turns (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    turn_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    wall_time REAL NOT NULL,
    cancelled INTEGER NOT NULL,
    error TEXT,
    record TEXT NOT NULL
)
"""


class TraceStore:
    def __init__(self, db_path: Path, *, max_turns: int, owner: bool = False) -> None:
        """``owner``: the daemon's store, which holds the database's lock for its life (raises
        TurnDatabaseInUse when another process holds it)."""
        if max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns}")
        self.db_path = db_path
        self.max_turns = max_turns
        self._claimed = claim(db_path) if owner else None
        try:
            db_path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(db_path), check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(_SCHEMA)
        except (sqlite3.Error, OSError) as err:
            if self._claimed is not None:
                release(self._claimed)
            raise OSError(
                f"cannot open the turn trace store {db_path}: {err} "
                "(fix: point trace.db_path at a writable file)"
            ) from err
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trace-store")
        self.db_path = db_path
        self.failed_writes = 0  # turns that could not be stored (disk full, file gone read-only)
        self.last_write_error: str | None = None

    def add(self, trace: TurnTrace) -> None:
        """Commit one turn and drop the oldest beyond ``max_turns``. A failure is counted (the admin
        page warns about it) and raised."""
        try:
            self._add(trace)
        except (sqlite3.Error, OSError) as err:
            self.failed_writes += 1
            self.last_write_error = str(err)
            raise

    def _add(self, trace: TurnTrace) -> None:
        record = json.dumps(trace.to_dict(), ensure_ascii=False)
        with self._lock:
            self._db.execute("BEGIN")
            try:
                self._db.execute(
                    "INSERT INTO turns (turn_id, session_id, wall_time, cancelled, error, record) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        trace.turn_id,
                        trace.session_id,
                        trace.wall_time,
                        int(trace.cancelled),
                        trace.error,
                        record,
                    ),
                )
                self._db.execute(
                    "DELETE FROM turns WHERE seq <= (SELECT MAX(seq) FROM turns) - ?", (self.max_turns,)
                )
            except BaseException:
                if self._db.in_transaction:  # SQLite rolls back by itself on some errors (disk full)
                    self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    async def add_async(self, trace: TurnTrace) -> None:
        # Shielded: a session stopped while it waits (the daemon shutting down as a call ends) must
        # not take the queued write back; ``close`` waits for it.
        await asyncio.shield(asyncio.wrap_future(self._executor.submit(self.add, trace)))

    def count(self) -> int:
        with self._lock:
            (count,) = self._db.execute("SELECT COUNT(*) FROM turns").fetchone()
        return int(count)

    def recent(self, limit: int = 100) -> list[TurnTrace]:
        """The newest ``limit`` turns, newest first."""
        with self._lock:
            rows = self._db.execute("SELECT record FROM turns ORDER BY seq DESC LIMIT ?", (limit,)).fetchall()
        return [TurnTrace.from_dict(json.loads(row[0])) for row in rows]

    def summary(self, limit: int | None = None) -> dict[str, StageSummary]:
        """p50/p95/p99 per stage over the stored turns (the newest ``limit`` when given)."""
        return summarize(self.recent(limit if limit is not None else self.max_turns))

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        with self._lock:
            self._db.close()
        if self._claimed is not None:
            release(self._claimed)
            self._claimed = None
