"""Speech over a reply, carried out (appliance/pipeline/speech_over_reply.py), with stand-ins for the
session's parts: a backchannel resumes the paused reply, a stop word cuts it and what follows right after
is only more of it, anything else cuts it and starts a turn from the person's pause."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from appliance.pipeline.overlap import Overlap, OverlapKind
from appliance.pipeline.params import OverlapParams
from appliance.pipeline.speech_over_reply import SessionParts, SpeechOverReply
from appliance.trace.record import TurnTrace


class Player:
    def __init__(self) -> None:
        self.resumed = 0

    async def resume(self) -> None:
        self.resumed += 1


class Parts:
    """What the session gives: the endpointer, partials and turns it drives, and its start_turn."""

    def __init__(self) -> None:
        self.dismissed = 0
        self.partials_stopped = 0
        self.barge_ins: list[str] = []
        self.started: list[tuple[Any, bool]] = []
        self.endpointer = SimpleNamespace(dismiss=self._dismiss, in_speech=False)
        self.partials = SimpleNamespace(stop=self._stop_partials)
        self.turns = SimpleNamespace(barge_in=self._barge_in)

    def _dismiss(self) -> None:
        self.dismissed += 1

    def _stop_partials(self) -> None:
        self.partials_stopped += 1

    async def _barge_in(self, why: str) -> None:
        self.barge_ins.append(why)

    async def start_turn(self, event: Any, now: float, confirmed: bool) -> None:
        self.started.append((event, confirmed))

    def session_parts(self) -> SessionParts:
        return SessionParts(
            "s-test",
            endpointer=lambda: self.endpointer,  # type: ignore[arg-type,return-value]
            engines=lambda: None,  # type: ignore[arg-type,return-value]
            partials=lambda: self.partials,  # type: ignore[arg-type,return-value]
            turns=self.turns,  # type: ignore[arg-type]
            start_turn=self.start_turn,
        )


def _over_a_reply(kind: OverlapKind, *, pause: object = None) -> tuple[SpeechOverReply, Parts, Any]:
    parts = Parts()
    over = SpeechOverReply(OverlapParams(), parts.session_parts())
    reply = SimpleNamespace(player=Player(), trace=TurnTrace(turn_id="t1", session_id="s-test"))
    over.overlaps.current = Overlap(reply, 10.0, 10.2, 30.0, 1.5, speech=True, pause=pause)  # type: ignore[arg-type]
    asyncio.run(over.settle(kind, 11.0))
    return over, parts, reply


def test_a_backchannel_resumes_the_reply_and_is_kept_on_its_trace() -> None:
    over, parts, reply = _over_a_reply(OverlapKind.BACKCHANNEL)
    assert reply.player.resumed == 1 and not parts.barge_ins and not parts.started
    assert parts.dismissed == 1 and parts.partials_stopped == 1
    assert [o["kind"] for o in reply.trace.overlaps] == ["backchannel"]
    assert not over.pending


def test_a_stop_word_cuts_the_reply_and_the_words_right_after_are_more_of_it() -> None:
    over, parts, reply = _over_a_reply(OverlapKind.STOP_WORD)
    assert parts.barge_ins == ["stop_word"] and reply.player.resumed == 0 and not parts.started
    rest = over.after_a_stop(11.2)
    assert rest is not None and rest("stop")
    assert over.after_a_stop(11.0 + 60.0) is None  # speech long after is a turn of its own


def test_a_new_question_cuts_the_reply_and_is_a_turn_from_its_pause() -> None:
    pause = object()
    _, parts, reply = _over_a_reply(OverlapKind.INTERRUPTION, pause=pause)
    assert parts.barge_ins == [OverlapKind.INTERRUPTION.value] and reply.player.resumed == 0
    assert parts.started == [(pause, False)]
