"""Every audio endpoint, a microphone or a phone call, as a session on the daemon's shared engines:
its own VAD state, endpointer and conversation, shown on the admin page while it lasts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from appliance.audio.base import AudioSink, AudioSource
from appliance.audio.denoise import suppress_noise
from appliance.daemon.load import Daemon
from appliance.pipeline.call_policy import CallLine
from appliance.pipeline.session import Session, SessionConfig
from appliance.trace.labels import SessionKind, SessionState
from appliance.trace.record import TurnTrace


class SessionRegistry(Protocol):
    """Where live sessions are shown (the admin page's ``LiveRegistry``). Its own methods show them
    nowhere: ``NullRegistry``, when the page is off."""

    def open_session(
        self,
        session_id: str,
        kind: SessionKind,
        peer: str = "",
        state_of: Callable[[], SessionState] | None = None,
        heard_of: Callable[[], str] | None = None,
        wakes_of: Callable[[], int] | None = None,
    ) -> None:
        return None

    def update_session(
        self, session_id: str, *, state: SessionState | None = None, turn_done: bool = False
    ) -> None:
        return None

    def close_session(self, session_id: str) -> None:
        return None


class NullRegistry(SessionRegistry):
    """The registry when the admin page is off: sessions are shown nowhere."""


async def run_session(
    daemon: Daemon,
    registry: SessionRegistry,
    source: AudioSource,
    sink: AudioSink,
    *,
    session_id: str,
    kind: SessionKind,
    peer: str,
    config: SessionConfig,
    max_turns: int | None = None,
    on_turn: Callable[[TurnTrace], None] | None = None,
    call: CallLine | None = None,
) -> Session:
    """One audio endpoint as a session on the shared engines, shown in ``registry`` while it runs."""

    def turn_done(trace: TurnTrace) -> None:
        registry.update_session(session_id, turn_done=True)
        if on_turn is not None:
            on_turn(trace)

    engines = daemon.engines
    source = suppress_noise(
        source, engines.denoise, engines.denoise_worker, feed=daemon.settings.denoise.feed
    )
    session = Session(
        engines=engines,
        source=source,
        sink=sink,
        config=config,
        store=daemon.store,
        session_id=session_id,
        on_turn=turn_done,
        engines_offered=lambda: daemon.engines,
        call=call,
    )
    registry.open_session(
        session_id,
        kind,
        peer,
        state_of=lambda: shown_state(session),
        heard_of=lambda: session.partials.record.latest if session.endpointer.in_speech else "",
        wakes_of=lambda: session.hearing.wakes,
    )
    daemon.sessions.add(session)
    try:
        await session.run(max_turns=max_turns)
    finally:
        daemon.sessions.discard(session)
        registry.close_session(session_id)
    return session


def shown_state(session: Session) -> SessionState:
    """What the admin page shows of a session: speaking (a reply playing), thinking (a turn running),
    listening, or waiting for the wake word (wake.activation = wake_word, nobody addressing it)."""
    if session.turns.playing:
        return SessionState.SPEAKING
    if session.turns.active is not None:
        return SessionState.THINKING
    return SessionState.LISTENING if session.hearing.addressed else SessionState.WAITING_FOR_WAKE_WORD
