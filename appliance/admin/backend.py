"""What the admin page reads from the daemon: a small, read-mostly interface.

The daemon implements it with :class:`appliance.admin.local.LocalBackend` (the turn trace store, the
configuration file, and a :class:`LiveRegistry` that the pipeline keeps up to date). Every method is
synchronous and may block briefly (SQLite, /proc, nvidia-smi); the web app calls them from worker
threads, never on the event loop, except ``health`` (liveness), which must not block.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from appliance.admin.schemas import (
    BundleSummary,
    ConfigUpdate,
    ConfigView,
    EngineState,
    FactsFileView,
    FactsSaved,
    Health,
    LiveSession,
    LlmLoad,
    Readiness,
    Restarting,
    SettingsSection,
    SipRegistrationView,
    StatusReport,
    TriedAnswer,
)
from appliance.trace import TurnTrace
from appliance.trace.labels import SessionKind, SessionState


class AdminBackend(Protocol):
    def health(self) -> Health:
        """Called on the event loop itself (liveness): must not block."""
        ...

    def readiness(self) -> Readiness: ...

    def status(self) -> StatusReport: ...

    def sessions(self) -> list[LiveSession]: ...

    def llm_load(self) -> LlmLoad | None:
        """The LLM's slots and queue; None before the engines are loaded."""
        ...

    def recent_traces(self, limit: int) -> list[TurnTrace]:
        """The newest ``limit`` turns, newest first."""
        ...

    def budget_ms(self) -> float:
        """The turn latency budget in force (``trace.budget_ms``)."""
        ...

    def turns_not_stored(self) -> int:
        """Turns the trace store failed to keep since the start."""
        ...

    def config(self) -> ConfigView: ...

    def update_config(self, changes: dict[str, dict[str, Any]]) -> ConfigUpdate:
        """Validate, write atomically, apply what can be applied now.

        Raises ``appliance.config.ConfigError`` (bad values) or ``ConfigNotWritable``.
        """
        ...

    def config_schema(self) -> list[SettingsSection]:
        """Every setting with its description, unit, bounds, choices and default (the control panel)."""
        ...

    def facts(self) -> list[FactsFileView]: ...

    def save_facts(self, tool: str, text: str) -> FactsSaved:
        """Replace a facts tool's file (FactsFileError: not readable as facts, nothing written)."""
        ...

    def try_question(self, question: str) -> TriedAnswer:
        """The answer the daemon gives now, through its own answer path (NotAvailable without one)."""
        ...

    def restart(self) -> Restarting:
        """Start again once no call is in progress (NotAvailable when the daemon cannot)."""
        ...


class NotAvailable(Exception):
    """The daemon cannot do that here (no engines to answer with, not run as a service)."""


class ConfigNotWritable(Exception):
    """The daemon has no configuration file it may write (it runs on the shipped default)."""


class LiveRegistry:
    """Engine and session state that the daemon updates and the admin page reads (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._engines: dict[str, EngineState] = {}
        self._sessions: dict[str, LiveSession] = {}
        self._state_of: dict[str, Callable[[], str]] = {}
        self._heard_of: dict[str, Callable[[], str]] = {}
        self._wakes_of: dict[str, Callable[[], int]] = {}
        self._wakes_of_closed = 0  # wake words heard by sessions that have ended
        self._llm_load: Callable[[], LlmLoad] | None = None
        self._bundle: BundleSummary | None = None
        self._registration: Callable[[], SipRegistrationView | None] | None = None
        self._sip_events: Callable[[], dict[str, int]] | None = None
        self._notices: list[str] = []

    def watch_registration(self, read: Callable[[], SipRegistrationView | None]) -> None:
        """Where the SIP registration's state is read when shown."""
        self._registration = read

    def registration(self) -> SipRegistrationView | None:
        read = self._registration
        return None if read is None else read()

    def watch_sip_events(self, read: Callable[[], dict[str, int]]) -> None:
        """Where the SIP server's counts of what it refused or dropped are read."""
        self._sip_events = read

    def sip_events(self) -> dict[str, int] | None:
        read = self._sip_events
        return None if read is None else read()

    def set_bundle(self, bundle: BundleSummary) -> None:
        """The bundle the engines run from now (a bundle version activated while running)."""
        self._bundle = bundle

    def bundle(self) -> BundleSummary | None:
        return self._bundle

    def add_notice(self, text: str) -> None:
        """Something the operator must know that happened while running (shown in the banner)."""
        with self._lock:
            self._notices.append(text)

    def notices(self) -> list[str]:
        with self._lock:
            return list(self._notices)

    def watch_llm(self, read: Callable[[], LlmLoad]) -> None:
        """Where the LLM's slots and queue are read when shown."""
        self._llm_load = read

    def llm_load(self) -> LlmLoad | None:
        read = self._llm_load
        return None if read is None else read()

    def set_engine(self, state: EngineState) -> None:
        with self._lock:
            self._engines[state.name] = state

    def expect_engines(self, names: list[str]) -> None:
        """Declare the engines readiness waits for (not loaded until ``set_engine`` says so)."""
        with self._lock:
            for name in names:
                self._engines.setdefault(name, EngineState(name=name))

    def engines(self) -> list[EngineState]:
        with self._lock:
            return list(self._engines.values())

    def open_session(
        self,
        session_id: str,
        kind: SessionKind,
        peer: str = "",
        state_of: Callable[[], SessionState] | None = None,
        heard_of: Callable[[], str] | None = None,
        wakes_of: Callable[[], int] | None = None,
    ) -> None:
        """``state_of``: the session's own state (listening, thinking, speaking); ``heard_of``: its
        partial transcript of the utterance in progress; ``wakes_of``: the wake words it heard; all
        read when shown."""
        with self._lock:
            self._sessions[session_id] = LiveSession(
                session_id=session_id, kind=kind, peer=peer, started_at=time.time()
            )
            if state_of is not None:
                self._state_of[session_id] = state_of
            if heard_of is not None:
                self._heard_of[session_id] = heard_of
            if wakes_of is not None:
                self._wakes_of[session_id] = wakes_of

    def update_session(
        self, session_id: str, *, state: SessionState | None = None, turn_done: bool = False
    ) -> None:
        with self._lock:
            current = self._sessions.get(session_id)
            if current is None:
                return
            changes: dict[str, Any] = {}
            if state is not None:
                changes["state"] = state
            if turn_done:
                changes["turns"] = current.turns + 1
            self._sessions[session_id] = current.model_copy(update=changes)

    def _live(self, session_id: str) -> dict[str, Any]:
        live: dict[str, Any] = {}
        if session_id in self._state_of:
            live["state"] = self._state_of[session_id]()
        if session_id in self._heard_of:
            live["heard"] = self._heard_of[session_id]()
        if session_id in self._wakes_of:
            live["wakes"] = self._wakes_of[session_id]()
        return live

    def close_session(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)
            self._state_of.pop(session_id, None)
            self._heard_of.pop(session_id, None)
            wakes_of = self._wakes_of.pop(session_id, None)
            if wakes_of is not None:
                self._wakes_of_closed += wakes_of()

    def wake_words_heard(self) -> int:
        """Wake words heard since the start, by every session (ended ones included)."""
        with self._lock:
            return self._wakes_of_closed + sum(read() for read in self._wakes_of.values())

    def sessions(self) -> list[LiveSession]:
        with self._lock:
            shown = [s.model_copy(update=self._live(s.session_id)) for s in self._sessions.values()]
        return sorted(shown, key=lambda s: s.started_at)
