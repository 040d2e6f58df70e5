"""Resumable steps: each step's outcome is recorded in a state file, and a re-run skips what is done.

A step is a function ``run(ctx) -> StepOutcome`` that raises :class:`StepFailed` (with the fix) when
it cannot finish. Before a step runs, its state is written as ``running``: a run that is killed
leaves ``running`` behind, which the next run treats as not done. ``--force`` re-runs every step,
``--from STEP`` re-runs that step and the ones after it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Generic, TypeVar

from provisioning.files import atomic_write_text

log = logging.getLogger(__name__)

STATE_NAME = "state.json"
STATE_FORMAT = 1

DONE = "done"  # finished (including "not needed here", recorded in the summary)
FAILED = "failed"
RUNNING = "running"  # started and never finished: the run was killed
INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM during the step
BLOCKED = "blocked"  # not run: a step it needs is not done
SKIPPED = "skipped"  # done in an earlier run (only in a run's results, never stored)

C = TypeVar("C")


class StepFailed(Exception):
    """A step that cannot finish; ``fix`` tells the technician what to do."""

    def __init__(self, message: str, *, fix: str, outputs: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.outputs = outputs or {}


@dataclass(frozen=True)
class StepOutcome:
    summary: str
    outputs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Step(Generic[C]):
    name: str
    title: str
    run: Callable[[C], StepOutcome]
    needs: tuple[str, ...] = ()
    # A cheap check that what a done step made is still there; False re-runs the step.
    still_valid: Callable[[C], bool] | None = None
    always: bool = False  # runs on every run, whatever failed before (the report)


@dataclass
class StepRecord:
    name: str
    status: str
    summary: str = ""
    outputs: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    fix: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    duration_s: float | None = None
    attempts: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepRecord:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class StateStore:
    """``state.json`` in the state folder, rewritten atomically after every change."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / STATE_NAME
        self.records: dict[str, StepRecord] = {}
        self.meta: dict[str, Any] = {}
        if self.path.is_file():
            self._load()

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            steps = data["steps"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            # A damaged state file only costs re-running steps; keep a copy for the report.
            log.warning("provisioning state %s is unreadable (%s); starting over", self.path, err)
            self.path.replace(self.path.with_suffix(".damaged"))
            return
        self.meta = dict(data.get("meta", {}))
        self.records = {name: StepRecord.from_dict(rec) for name, rec in steps.items()}

    def get(self, name: str) -> StepRecord | None:
        return self.records.get(name)

    def put(self, record: StepRecord) -> None:
        self.records[record.name] = record
        self.save()

    def save(self) -> None:
        payload = {
            "format": STATE_FORMAT,
            "meta": self.meta,
            "steps": {name: rec.to_dict() for name, rec in self.records.items()},
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, json.dumps(payload, indent=2) + "\n")


Reporter = Callable[[str, StepRecord], None]


def run_steps(
    steps: Sequence[Step[C]],
    ctx: C,
    store: StateStore,
    *,
    force: bool = False,
    from_step: str | None = None,
    only: Sequence[str] = (),
    report: Reporter | None = None,
) -> dict[str, StepRecord]:
    """Run the steps in order; returns this run's record of every step (skipped ones included)."""
    names = [s.name for s in steps]
    for name in [from_step, *only]:
        if name is not None and name not in names:
            raise ValueError(f"unknown step {name!r}; the steps are: {', '.join(names)}")
    rerun_from = names.index(from_step) if from_step else len(names)
    results: dict[str, StepRecord] = {}
    for index, step in enumerate(steps):
        if only and step.name not in only and not step.always:
            record = store.get(step.name) or StepRecord(step.name, BLOCKED, summary="not run yet")
            results[step.name] = record
            continue
        previous = store.get(step.name)
        if step.always:
            results[step.name] = _run_one(step, ctx, store, previous, report)
            continue
        # A step whose prerequisite was redone in this run is redone too (new bundle -> new plans).
        redone_needs = any(results.get(n) is not None and results[n].status == DONE for n in step.needs)
        wanted = force or index >= rerun_from or bool(only) or redone_needs
        if not wanted and previous is not None and previous.status == DONE and _still_valid(step, ctx):
            results[step.name] = StepRecord(**{**previous.to_dict(), "status": SKIPPED})
            _emit(report, step.title, results[step.name])
            continue
        missing = [
            n for n in step.needs if results.get(n) is None or results[n].status not in (DONE, SKIPPED)
        ]
        if missing:
            record = StepRecord(step.name, BLOCKED, summary=f"not run: needs {', '.join(missing)} first")
            record.attempts = previous.attempts if previous else 0
            store.put(record)
            results[step.name] = record
            _emit(report, step.title, record)
            continue
        results[step.name] = _run_one(step, ctx, store, previous, report)
    return results


def _still_valid(step: Step[C], ctx: C) -> bool:
    if step.still_valid is None:
        return True
    try:
        return step.still_valid(ctx)
    except Exception:
        log.exception("checking step %s", step.name)
        return False


def _run_one(
    step: Step[C], ctx: C, store: StateStore, previous: StepRecord | None, report: Reporter | None
) -> StepRecord:
    record = StepRecord(step.name, RUNNING, started_at=now_iso())
    record.attempts = (previous.attempts if previous else 0) + 1
    store.put(record)
    _emit(report, step.title, record)
    started = time.monotonic()
    try:
        outcome = step.run(ctx)
    except StepFailed as err:
        record.status, record.error, record.fix = FAILED, err.message, err.fix
        record.outputs = err.outputs
    except (KeyboardInterrupt, SystemExit):
        record.status, record.error = INTERRUPTED, "interrupted"
        record.fix = "run the same command again: finished steps are skipped"
        _finish(record, started, store)
        _emit(report, step.title, record)
        raise
    except Exception as err:
        log.exception("step %s failed unexpectedly", step.name)
        record.status, record.error = FAILED, f"{type(err).__name__}: {err}"
        record.fix = "this is a fault in the provisioning tool: send the report to support"
    else:
        record.status, record.summary, record.outputs = DONE, outcome.summary, outcome.outputs
    _finish(record, started, store)
    _emit(report, step.title, record)
    return record


def _finish(record: StepRecord, started: float, store: StateStore) -> None:
    record.finished_at = now_iso()
    record.duration_s = round(time.monotonic() - started, 3)
    store.put(record)


def _emit(report: Reporter | None, title: str, record: StepRecord) -> None:
    if report is not None:
        report(title, record)
