"""The linear ear's rule on made-up frame powers (its measured effect is bench aec's and bench
interruptions --echo's; a session hearing a hidden stop word through it is in test_echo_session)."""

from __future__ import annotations

from appliance.pipeline.echo_gate import EchoGate, EchoGateParams
from appliance.pipeline.linear_ear import CANCELLED_FRAMES, ECHO_FRAMES, LinearEar
from engines.vad.params import VadParams

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
    _learnt(fresh, frames=ECHO_FRAMES - 1)
    assert not fresh.hears(1.0, ECHO, ECHO)


def test_a_pause_in_the_reply_keeps_the_echo_just_heard_as_the_measure() -> None:
    """The echo removed drops in a pause; the reverberation left must not count as a person."""
    ear = LinearEar(0.85)
    _learnt(ear)
    assert not ear.hears(1.0, ECHO / 50, ECHO / 1000)  # the tail of the last word, the reply silent
    assert ear.hears(1.0, ECHO / 2, ECHO / 1000)  # a person starting in the pause


def test_silero_must_be_sure() -> None:
    ear = LinearEar(0.85)
    _learnt(ear)
    assert not ear.hears(0.8, ECHO, ECHO)


def test_the_ear_is_behind_the_echo_canceller_only_and_can_be_turned_off() -> None:
    vad = VadParams()
    assert EchoGate.of(vad, EchoGateParams(), echo_cancelled=True).linear_threshold == 0.85
    assert EchoGate.of(vad, EchoGateParams(), echo_cancelled=False).linear_threshold is None
    off = EchoGateParams(linear_threshold_while_playing=None)
    assert EchoGate.of(vad, off, echo_cancelled=True).linear_threshold is None
