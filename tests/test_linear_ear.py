"""The linear ear's rule on made-up frame powers (its measured effect is bench aec's and bench
interruptions --echo's; a session hearing a hidden stop word through it is in test_echo_session)."""

from __future__ import annotations

import asyncio

import numpy as np

from appliance.audio.base import FRAME_S, FRAME_SAMPLES, HeardFrame
from appliance.pipeline import speech_loop
from appliance.pipeline.echo_gate import EchoGate, EchoGateParams
from appliance.pipeline.linear_ear import CANCELLED_FRAMES, ECHO_FRAMES, TRUST_FRAMES, LinearEar
from appliance.pipeline.session_config import SessionConfig
from appliance.pipeline.speech_loop import EAR_TAIL_S, SpeechLoop
from engines.vad.endpointer import EndpointEvent
from engines.vad.params import VadParams
from tests.fixtures.pipeline import make_fakes

ECHO = 1e-3  # the echo's power at the microphone, about -30 dBFS
RESIDUE = ECHO / 100  # what a converged canceller leaves: 20 dB down


def _learnt(ear: LinearEar, frames: int = CANCELLED_FRAMES, left: float = RESIDUE) -> None:
    """The reply's echo alone, removed down to ``left``."""
    for _ in range(frames):
        assert not ear.hears(0.2, left, ECHO)


def test_a_person_as_loud_as_the_echo_is_heard_once_the_canceller_removes_most_of_it() -> None:
    ear = LinearEar(0.85)
    _learnt(ear)
    assert ear.hears(0.97, ECHO, ECHO)
    assert ear.hears(0.97, ECHO / 5, ECHO)  # 7 dB quieter than the echo: still a person


def test_the_residue_of_the_echo_is_not_heard_however_sure_silero_is() -> None:
    ear = LinearEar(0.85)
    _learnt(ear)
    assert not ear.hears(1.0, RESIDUE, ECHO)
    assert not ear.hears(1.0, ECHO / 20, ECHO)  # 13 dB down


def test_nothing_is_heard_while_the_canceller_removes_little() -> None:
    """Learning the room, or a hall whose echo outlasts the filter: what is left is as loud as a person."""
    ear = LinearEar(0.85)
    _learnt(ear, left=ECHO / 2)  # 3 dB removed
    assert not ear.hears(1.0, ECHO, ECHO)
    fresh = LinearEar(0.85)
    _learnt(fresh, frames=TRUST_FRAMES - 1)
    assert not fresh.hears(1.0, ECHO, ECHO)


def test_a_filter_placed_or_solved_is_judged_on_its_own_frames() -> None:
    """The canceller went on from a filter placed or solved (``HeardFrame.new_filter``): the
    frames before, while it removed little, do not count against it; its own frames must show it
    removing most of the echo before the ear trusts it."""
    ear = LinearEar(0.85)
    _learnt(ear, frames=CANCELLED_FRAMES // 2, left=ECHO / 2)  # the first half second: 3 dB removed
    assert not ear.hears(0.2, RESIDUE, ECHO, new_filter=True)
    _learnt(ear, frames=TRUST_FRAMES - 2)
    assert not ear.hears(1.0, ECHO, ECHO)  # too few frames of the new filter yet
    assert ear.hears(1.0, ECHO, ECHO)
    kept_history = LinearEar(0.85)
    _learnt(kept_history, frames=CANCELLED_FRAMES // 2, left=ECHO / 2)
    _learnt(kept_history, frames=TRUST_FRAMES)
    assert not kept_history.hears(1.0, ECHO, ECHO)  # without the mark, the poor frames still count


def test_a_pause_in_the_reply_keeps_the_echo_just_heard_as_the_measure() -> None:
    """The echo removed drops in a pause; the reverberation left must not count as a person."""
    ear = LinearEar(0.85)
    _learnt(ear)
    assert not ear.hears(1.0, ECHO / 50, ECHO / 1000)  # the tail of the last word, the reply silent
    assert ear.hears(1.0, ECHO / 2, ECHO / 1000)  # a person starting in the pause


def test_the_rooms_noise_in_a_long_pause_is_not_a_person() -> None:
    """The speaker runs dry between clauses (a slow machine): once the echo measure has emptied,
    the room's noise is all there is, and Silero, having just heard the residue's words, still says
    speech for a moment. A person is well over that noise."""
    noise = ECHO / 3000  # -65 dBFS, in the gaps between the reply's words
    ear = LinearEar(0.85)
    for index in range(CANCELLED_FRAMES):
        assert not ear.hears(0.2, RESIDUE if index % 4 else noise, ECHO if index % 4 else noise / 10)
    for frame in range(3 * ECHO_FRAMES):  # the tail dies away into the noise, which peaks 7 dB up
        tail = max(ECHO / 50 * 0.5**frame, noise * 5)
        assert not ear.hears(1.0, tail, noise / 10), frame
    assert ear.hears(1.0, ECHO / 10, noise / 10)  # a person, 10 dB quieter than the echo was
    assert ear.hears(1.0, noise * 5, noise / 10)  # the quiet end of their word
    assert not ear.hears(0.5, noise * 5, noise / 10)
    assert not ear.hears(1.0, noise * 5, noise / 10)  # and no more once a frame was not heard


def test_a_frame_the_filter_cancels_about_as_well_as_usual_is_the_reply() -> None:
    """A filter that removes 15 dB on the whole leaves some frames only 7 dB down: the reply's own
    words, which Silero is sure of. Only a frame far less cancelled than usual is a person."""
    ear = LinearEar(0.85)
    _learnt(ear, left=ECHO / 30)  # 15 dB removed
    assert not ear.hears(1.0, ECHO / 5, ECHO)  # 7 dB down
    assert ear.hears(1.0, ECHO, ECHO)  # a person as loud as the echo: nothing of the frame removed
    converged = LinearEar(0.85)
    _learnt(converged)  # 20 dB removed: the same 7 dB is a person
    assert converged.hears(0.97, ECHO / 5, ECHO)


def test_silero_must_be_sure() -> None:
    ear = LinearEar(0.85)
    _learnt(ear)
    assert not ear.hears(0.8, ECHO, ECHO)


def test_the_ear_is_behind_the_echo_canceller_only_and_can_be_turned_off() -> None:
    vad = VadParams()
    assert EchoGate.of(vad, EchoGateParams(), echo_cancelled=True).linear_threshold == 0.85
    assert EchoGate.of(vad, EchoGateParams(), echo_cancelled=False).linear_threshold is None
    off = EchoGateParams(linear_ear=False)
    assert EchoGate.of(vad, off, echo_cancelled=True).linear_threshold is None


def test_the_rooms_noise_between_words_does_not_count_against_the_canceller() -> None:
    ear = LinearEar(0.85)
    for index in range(CANCELLED_FRAMES):
        if index % 2:
            assert not ear.hears(0.2, RESIDUE, ECHO)  # a word of the reply, 20 dB removed
        else:
            assert not ear.hears(0.2, ECHO / 500, ECHO / 1000)  # between words: the noise over a faint echo
    assert ear.cancelled_db() >= 19.9
    assert ear.hears(0.97, ECHO, ECHO)


class _FrameClock:
    """``time.monotonic`` for the speech loop: each frame 32 ms after the last, as a microphone's."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


async def _heard_frames(
    gate: EchoGate, frames: list[tuple[HeardFrame, bool]], *, converged: bool = True
) -> list[tuple[bool, bool]]:
    """(voiced, by the linear ear alone) of each frame fed to a speech loop with the fake VAD (0.95 above
    an RMS of 0.05), each with whether a reply plays; ``converged``: the canceller's ``echo_converged``."""
    fakes = make_fakes()
    loop = SpeechLoop(SessionConfig(echo=gate), realtime=True, on_event=_ignore, label="test")
    clock = _FrameClock()
    real_time = speech_loop.time
    speech_loop.time = clock  # type: ignore[assignment]
    try:
        await loop.listen_with(fakes.engines)
        heard = []
        for frame, playing in frames:
            clock.now += FRAME_S
            await loop.feed(frame, playing=playing, echo_converged=converged)
            heard.append((loop.voiced, loop.by_linear_ear))
        return heard
    finally:
        speech_loop.time = real_time
        loop.close()
        for _engine, worker in fakes.engines.pairs().values():
            worker.shutdown()


async def _ignore(event: EndpointEvent, at: float) -> None:
    return None


def _frame(vad_rms: float, asr_rms: float, echo_power: float) -> HeardFrame:
    ones = np.ones(FRAME_SAMPLES, dtype=np.float32)
    return HeardFrame(for_vad=ones * vad_rms, for_asr=ones * asr_rms, echo_power=echo_power)


def test_the_speech_loop_hears_a_voice_the_suppressor_turned_down_only_while_a_reply_plays() -> None:
    echo = 0.1**2
    residue = [(_frame(0.0, 0.01, echo), True)] * CANCELLED_FRAMES  # the echo removed 20 dB down
    hidden = _frame(0.01, 0.1, echo)  # the person: turned down by the suppressor, whole in the linear output
    gate = EchoGate(0.5, 0.5, gate_while_playing=False, linear_threshold=0.85)

    tail = round(EAR_TAIL_S / FRAME_S)
    stopped = [(_frame(0.0, 0.0, 0.0), False)] * tail
    heard = asyncio.run(
        _heard_frames(gate, [*residue, (hidden, True), (hidden, False), *stopped, (hidden, False)])
    )
    assert not any(voiced for voiced, _ in heard[:CANCELLED_FRAMES])
    assert heard[CANCELLED_FRAMES] == (True, True)
    # Just after the reply paused or stopped, its echo's tail is still in the room: the ear hears on.
    assert heard[CANCELLED_FRAMES + 1] == (True, True)
    assert heard[-1] == (False, False)  # long after: the suppressor's output alone, as it hears it

    without = EchoGate(0.5, 0.5, gate_while_playing=False)
    assert asyncio.run(_heard_frames(without, [*residue, (hidden, True)]))[-1] == (False, False)


def test_while_the_canceller_learns_only_a_filter_that_already_cancels_lets_the_ear_hear() -> None:
    """A session's first seconds of reply (``echo_converged`` false): AEC3 lets the echo through, so
    its output is not heard at all; the linear ear is, if its filter already cancels the echo (a
    room kept from the last start), not if it is still learning (3 dB)."""
    echo = 0.1**2
    gate = EchoGate(0.5, 0.5, gate_while_playing=False, linear_threshold=0.85)
    let_through = _frame(0.1, 0.01, echo)  # AEC3's output: the reply's echo, loud
    hidden = _frame(0.01, 0.1, echo)  # the person, whole in the linear output
    kept = [(_frame(0.0, 0.01, echo), True)] * CANCELLED_FRAMES  # 20 dB down from the first frame
    heard = asyncio.run(_heard_frames(gate, [*kept, (let_through, True), (hidden, True)], converged=False))
    assert heard[CANCELLED_FRAMES] == (False, False)
    assert heard[-1] == (True, True)

    learning = [(_frame(0.0, 0.07, echo), True)] * CANCELLED_FRAMES  # 3 dB down
    heard = asyncio.run(_heard_frames(gate, [*learning, (hidden, True)], converged=False))
    assert heard[-1] == (False, False)
