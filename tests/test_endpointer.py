"""The endpointer state machine, fed plain probabilities and durations."""

from __future__ import annotations

from typing import Any

import pytest

from engines.vad.endpointer import Endpointer, EndpointEvent, EventKind
from engines.vad.params import EndpointerParams

F = 0.032  # one 512-sample frame at 16 kHz
ON, OFF = 0.9, 0.1


def run(endpointer: Endpointer, probabilities: list[float]) -> list[tuple[int, EndpointEvent]]:
    """(frame index, event) for every event."""
    out: list[tuple[int, EndpointEvent]] = []
    for index, probability in enumerate(probabilities):
        out.extend((index, event) for event in endpointer.feed(probability, F))
    return out


def kinds(events: list[tuple[int, EndpointEvent]]) -> list[tuple[int, str]]:
    return [(index, event.kind.value) for index, event in events]


def test_full_utterance_with_pre_roll_and_endpoint() -> None:
    ep = Endpointer(EndpointerParams(mode="silence", min_speech_ms=96, end_silence_ms=500, pre_roll_ms=256))
    # 20 frames of silence (0.64 s), 10 voiced (0.32 s), then silence.
    events = run(ep, [OFF] * 20 + [ON] * 10 + [OFF] * 20)
    assert kinds(events) == [(22, "speech_start"), (30, "probably_ended"), (45, "endpoint")]
    start, probably, end = (event for _, event in events)

    assert start.time_s == pytest.approx(23 * F)  # end of the 3rd voiced frame
    assert start.speech_start_s == pytest.approx(20 * F)
    assert start.utterance_start_s == pytest.approx(20 * F - 0.256)
    assert start.speech_end_s is None

    assert probably.speech_end_s == pytest.approx(30 * F)
    assert probably.time_s == pytest.approx(31 * F)

    # 0.5 s of silence after the last voiced frame = 15.625 frames -> confirmed at the end of frame 45.
    assert end.time_s == pytest.approx(46 * F)
    assert end.speech_end_s == pytest.approx(30 * F)
    assert end.utterance_start_s == start.utterance_start_s
    assert not end.forced
    assert not ep.in_speech


def test_short_blip_does_not_start_an_utterance() -> None:
    ep = Endpointer(EndpointerParams(mode="silence", min_speech_ms=96))
    assert run(ep, [OFF, ON, ON, OFF, ON, OFF, ON, ON, OFF] * 5) == []
    assert not ep.in_speech


def test_min_speech_zero_starts_on_the_first_voiced_frame() -> None:
    ep = Endpointer(EndpointerParams(mode="silence", min_speech_ms=0, pre_roll_ms=0))
    assert kinds(run(ep, [OFF, ON])) == [(1, "speech_start")]
    assert ep.in_speech


def test_pause_shorter_than_end_silence_resumes() -> None:
    ep = Endpointer(EndpointerParams(mode="silence", end_silence_ms=500))
    # Voiced, 10 silent frames (0.32 s < 0.5 s), voiced again, then a real end.
    events = run(ep, [ON] * 5 + [OFF] * 10 + [ON] * 5 + [OFF] * 20)
    assert kinds(events) == [
        (2, "speech_start"),
        (5, "probably_ended"),
        (15, "resumed"),
        (20, "probably_ended"),
        (35, "endpoint"),
    ]
    resumed = events[2][1]
    assert resumed.speech_end_s is None
    assert events[-1][1].speech_end_s == pytest.approx(20 * F)


def test_pre_roll_never_goes_below_zero() -> None:
    ep = Endpointer(EndpointerParams(mode="silence", pre_roll_ms=256))
    events = run(ep, [OFF, ON, ON, ON])
    assert events[0][1].utterance_start_s == 0.0
    assert events[0][1].speech_start_s == pytest.approx(F)


def test_max_utterance_forces_an_endpoint_and_a_new_utterance_follows() -> None:
    ep = Endpointer(
        EndpointerParams(mode="silence", max_utterance_s=2.048, pre_roll_ms=256, min_speech_ms=64)
    )
    events = run(ep, [ON] * 77)
    assert kinds(events) == [(1, "speech_start"), (63, "endpoint"), (65, "speech_start")]
    forced = events[1][1]
    assert forced.forced
    assert forced.time_s == pytest.approx(64 * F)  # 2.048 s after the speech start at 0
    assert forced.speech_end_s == pytest.approx(64 * F)
    # The next utterance's pre-roll stops at the forced endpoint: no audio is used twice.
    again = events[2][1]
    assert again.speech_start_s == pytest.approx(64 * F)
    assert again.utterance_start_s == pytest.approx(64 * F)


def test_max_utterance_during_trailing_silence_keeps_the_last_voiced_end() -> None:
    ep = Endpointer(
        EndpointerParams(mode="silence", max_utterance_s=1.6, end_silence_ms=1000, min_speech_ms=32)
    )
    events = run(ep, [ON] * 40 + [OFF] * 20)
    assert kinds(events) == [(0, "speech_start"), (40, "probably_ended"), (49, "endpoint")]
    assert events[-1][1].forced
    assert events[-1][1].speech_end_s == pytest.approx(40 * F)


def test_threshold_is_inclusive_and_settable_at_run_time() -> None:
    ep = Endpointer(EndpointerParams(mode="silence", min_speech_ms=32), threshold=0.5)
    assert kinds(run(ep, [0.5])) == [(0, "speech_start")]

    ep = Endpointer(EndpointerParams(mode="silence", min_speech_ms=32), threshold=0.5)
    ep.threshold = 0.85  # the appliance is speaking: its own voice must not trigger a turn
    assert run(ep, [0.7] * 10) == []
    assert ep.threshold == 0.85
    events = run(ep, [0.9])
    assert [e.kind for _, e in events] == [EventKind.SPEECH_START]
    with pytest.raises(ValueError, match="threshold"):
        ep.threshold = 1.5


def test_raising_the_threshold_mid_utterance_applies_to_following_frames() -> None:
    ep = Endpointer(EndpointerParams(mode="silence", min_speech_ms=32), threshold=0.5)
    run(ep, [0.7, 0.7])
    ep.threshold = 0.8
    assert kinds(run(ep, [0.7])) == [(0, "probably_ended")]


def test_finish_closes_an_open_utterance() -> None:
    ep = Endpointer()
    run(ep, [ON] * 10)
    assert ep.in_speech
    (event,) = ep.finish()
    assert event.kind is EventKind.ENDPOINT and not event.forced
    assert event.speech_end_s == pytest.approx(10 * F)
    assert ep.finish() == []


def test_reset_forgets_everything_but_the_threshold() -> None:
    ep = Endpointer(EndpointerParams(mode="silence", min_speech_ms=32))
    ep.threshold = 0.7
    run(ep, [ON] * 5)
    ep.reset()
    assert not ep.in_speech and ep.time_s == 0.0 and ep.threshold == 0.7
    events = run(ep, [OFF, ON])
    assert events[0][1].speech_start_s == pytest.approx(F)


def test_variable_frame_durations_add_up() -> None:
    ep = Endpointer(EndpointerParams(mode="silence", min_speech_ms=100, end_silence_ms=200, pre_roll_ms=0))
    events = []
    for probability, duration in [(OFF, 0.25), (ON, 0.05), (ON, 0.05), (OFF, 0.1), (OFF, 0.1)]:
        events.extend(ep.feed(probability, duration))
    assert [e.kind for e in events] == [EventKind.SPEECH_START, EventKind.PROBABLY_ENDED, EventKind.ENDPOINT]
    assert events[0].speech_start_s == pytest.approx(0.25)
    assert events[-1].time_s == pytest.approx(0.55)
    assert events[-1].speech_end_s == pytest.approx(0.35)


def test_end_silence_of_two_frames_ends_on_the_second_silent_frame() -> None:
    ep = Endpointer(EndpointerParams(mode="silence", min_speech_ms=32, end_silence_ms=64))
    assert kinds(run(ep, [ON, OFF, OFF])) == [(0, "speech_start"), (1, "probably_ended"), (2, "endpoint")]


@pytest.mark.parametrize(
    ("probability", "duration", "match"),
    [
        (1.2, F, "probability"),
        (float("nan"), F, "probability"),
        (0.5, 0.0, "duration_s"),
        (0.5, -1.0, "duration_s"),
    ],
)
def test_bad_feed_values(probability: float, duration: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Endpointer().feed(probability, duration)


def test_bad_params() -> None:
    with pytest.raises(ValueError, match="threshold"):
        Endpointer(threshold=0.0)
    with pytest.raises(ValueError, match="end_silence_ms"):
        EndpointerParams(end_silence_ms=-100)
    with pytest.raises(ValueError, match="max_utterance_s"):
        EndpointerParams(max_utterance_s=0.0)


def smart(**keys: Any) -> Endpointer:
    params: dict[str, Any] = {
        "min_speech_ms": 96,
        "end_silence_ms": 500,
        "turn_check_ms": 160,
        "incomplete_silence_ms": 1600,
        "words_incomplete_silence_ms": 2400,
        # the values these cases were written for (the shipped ones are 0.9/0.05, words on, 1000 ms)
        "turn_complete_threshold": 0.5,
        "turn_incomplete_threshold": 0.5,
        "judge_words": False,
        "words_unsure_silence_ms": 500,
        "words_wait_ms": 300,
    }
    params.update(keys)
    return Endpointer(EndpointerParams(mode="smart_turn", **params))


def feed_all(ep: Endpointer, probabilities: list[float]) -> list[EndpointEvent]:
    return [event for probability in probabilities for event in ep.feed(probability, F)]


def test_smart_turn_asks_once_at_the_short_silence_and_a_complete_verdict_ends_the_turn() -> None:
    ep = smart()
    events = feed_all(ep, [ON] * 10 + [OFF] * 5)
    assert [e.kind for e in events] == [
        EventKind.SPEECH_START,
        EventKind.PROBABLY_ENDED,
        EventKind.TURN_CHECK,
    ]
    check = events[-1]
    assert check.speech_end_s is not None
    assert check.time_s - check.speech_end_s == pytest.approx(5 * F)  # 160 ms of silence
    assert feed_all(ep, [OFF] * 3) == []  # no second check in the same pause
    (end,) = ep.verdict(check.check_id, 0.9)
    assert end.kind is EventKind.ENDPOINT and end.by == "smart_turn"
    assert not ep.in_speech
    assert ep.verdict(check.check_id, 0.9) == []  # answered twice: nothing more


def test_smart_turn_incomplete_waits_for_the_long_silence_not_end_silence() -> None:
    ep = smart()
    check = feed_all(ep, [ON] * 10 + [OFF] * 5)[-1]
    assert ep.verdict(check.check_id, 0.1) == []
    assert feed_all(ep, [OFF] * 40) == []  # 45 frames = 1.44 s: past end_silence_ms, short of 1.6 s
    events = feed_all(ep, [OFF] * 6)
    assert [(e.kind, e.by) for e in events] == [(EventKind.ENDPOINT, "incomplete_silence")]


def test_smart_turn_with_no_verdict_yet_waits_for_the_long_silence() -> None:
    ep = smart()
    feed_all(ep, [ON] * 10 + [OFF] * 30)
    assert ep.in_speech  # 0.96 s of silence: end_silence_ms alone does not end a smart turn


def test_smart_turn_unsure_verdict_waits_for_end_silence() -> None:
    ep = smart(turn_complete_threshold=0.8, turn_incomplete_threshold=0.2)
    check = feed_all(ep, [ON] * 10 + [OFF] * 5)[-1]
    assert ep.verdict(check.check_id, 0.5) == []
    events = feed_all(ep, [OFF] * 11)  # 16 frames = 0.512 s of silence
    assert [(e.kind, e.by) for e in events][-1] == (EventKind.ENDPOINT, "silence")


def test_thresholds_in_the_wrong_order_are_refused() -> None:
    with pytest.raises(ValueError, match="incomplete_threshold"):
        EndpointerParams(turn_complete_threshold=0.3, turn_incomplete_threshold=0.6)


def test_smart_turn_failed_detector_falls_back_to_end_silence() -> None:
    ep = smart()
    check = feed_all(ep, [ON] * 10 + [OFF] * 20)[-1]  # 0.64 s of silence, the verdict still out
    (end,) = ep.verdict(check.check_id, None)
    assert end.by == "silence"  # already past end_silence_ms: ends on the answer


def test_smart_turn_verdict_for_a_pause_that_is_over_is_ignored() -> None:
    ep = smart()
    check = feed_all(ep, [ON] * 10 + [OFF] * 5)[-1]
    resumed = feed_all(ep, [ON] * 5)
    assert [e.kind for e in resumed] == [EventKind.RESUMED]
    assert ep.verdict(check.check_id, 0.9) == []
    assert ep.in_speech
    second = feed_all(ep, [OFF] * 5)[-1]
    assert second.kind is EventKind.TURN_CHECK and second.check_id != check.check_id
    assert [e.by for e in ep.verdict(second.check_id, 0.9)] == ["smart_turn"]


def test_silence_mode_never_asks() -> None:
    ep = Endpointer(EndpointerParams(mode="silence", end_silence_ms=500))
    events = feed_all(ep, [ON] * 10 + [OFF] * 20)
    assert [e.kind for e in events][-1] is EventKind.ENDPOINT
    assert EventKind.TURN_CHECK not in [e.kind for e in events]
    assert events[-1].by == "silence"


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="mode"):
        EndpointerParams(mode="guess")


# --- the words' verdict beside the sound's ------------------------------------------------------


def _pause(ep: Endpointer, frames: int = 5) -> tuple[int, int]:
    """Speech then ``frames`` of silence: (the pause's id, its TURN_CHECK's id, 0 if none yet)."""
    events = feed_all(ep, [ON] * 10 + [OFF] * frames)
    pause = next(e.pause_id for e in events if e.kind is EventKind.PROBABLY_ENDED)
    check = next((e.check_id for e in events if e.kind is EventKind.TURN_CHECK), 0)
    return pause, check


def test_unfinished_words_hold_a_pause_that_sounds_finished() -> None:
    """ "... out of the" with a falling voice: the sound says finished, the words say not. The
    finished-sounding verdict waits for the expected words, which hold the turn to the long silence."""
    ep = smart(judge_words=True, words_wait_ms=300)
    pause, check = _pause(ep)
    ep.expect_text(pause)
    assert ep.verdict(check, 0.97) == []  # no end: the words are expected
    assert ep.text_verdict(pause, 0.0002) == []
    assert ep.verdicts.text == 0.0002 and ep.verdicts.audio == 0.97
    events = feed_all(ep, [OFF] * 90)
    (end,) = [e for e in events if e.kind is EventKind.ENDPOINT]
    assert end.by == "incomplete_silence" and end.time_s - (end.speech_end_s or 0.0) == pytest.approx(
        2.4, abs=0.04
    )


def test_unfinished_words_hold_longer_than_an_unfinished_sound() -> None:
    """A pause after "the" is a pause, however long the person thinks: the words' own limit
    (words_incomplete_silence_ms) holds it past the sound's (incomplete_silence_ms)."""
    held = {}
    for words in (None, 0.0002):
        ep = smart(judge_words=words is not None, turn_incomplete_threshold=0.3)
        pause, check = _pause(ep)
        if words is not None:
            ep.expect_text(pause)
        ep.verdict(check, 0.1)  # the sound: unfinished
        if words is not None:
            ep.text_verdict(pause, words)
        (end,) = [e for e in feed_all(ep, [OFF] * 90) if e.kind is EventKind.ENDPOINT]
        held[words] = round(end.time_s - (end.speech_end_s or 0.0), 1)
    assert held == {None: 1.6, 0.0002: 2.4}


def test_finished_words_and_sound_end_the_pause_at_once() -> None:
    ep = smart(judge_words=True)
    pause, check = _pause(ep)
    ep.expect_text(pause)
    assert ep.verdict(check, 0.95) == []
    (end,) = ep.text_verdict(pause, 0.8)
    assert end.kind is EventKind.ENDPOINT and end.by == "fused"


def test_words_alone_wait_for_the_sound() -> None:
    """A gap between two words is a pause too ("She had a dark suit | in ..."): however sure the words,
    the pause ends no sooner than the sound's check; unfinished words hold it at once."""
    ep = smart(judge_words=True, turn_check_ms=256)
    pause, check = _pause(ep, frames=2)
    assert check == 0  # the sound was not asked yet
    ep.expect_text(pause)
    assert ep.text_verdict(pause, 0.9) == []
    events = feed_all(ep, [OFF] * 8)
    (asked,) = [e for e in events if e.kind is EventKind.TURN_CHECK]
    (end,) = ep.verdict(asked.check_id, 0.6)  # unsure alone, finished with the words
    assert end.by == "fused"


def test_expected_words_that_never_come_leave_the_sound_to_decide_after_text_wait() -> None:
    """The language model got busy, or failed: a finished-sounding pause waits words_wait_ms, no more."""
    ep = smart(judge_words=True, words_wait_ms=200)
    pause, check = _pause(ep)
    ep.expect_text(pause)
    assert ep.verdict(check, 0.95) == []
    events = feed_all(ep, [OFF] * 10)
    (end,) = [e for e in events if e.kind is EventKind.ENDPOINT]
    assert end.by == "smart_turn" and end.time_s - (end.speech_end_s or 0.0) == pytest.approx(
        0.16 + 0.2, abs=0.04
    )


def _shipped_with_words() -> Endpointer:
    return Endpointer(EndpointerParams())  # the shipped settings: smart_turn, words judged, 500 / 1000 ms


def test_an_unsure_sound_waits_for_expected_words_past_end_silence() -> None:
    """On a slow machine the words come after Whisper and the prompt pass, later than end_silence_ms:
    "Mr. Quilter is the apostle of the" with an unsure sound was cut at 500 ms. Now no timer of the
    sound ends the pause while the words are on their way; unfinished words then hold it."""
    ep = _shipped_with_words()
    pause, check = _pause(ep)
    ep.expect_text(pause)
    assert ep.verdict(check, 0.5) == []  # between the thresholds: unsure
    assert [e for e in feed_all(ep, [OFF] * 20) if e.kind is EventKind.ENDPOINT] == []  # 640 ms more
    assert ep.text_verdict(pause, 0.001) == []  # "... of the": unfinished
    events = feed_all(ep, [OFF] * 40)
    (end,) = [e for e in events if e.kind is EventKind.ENDPOINT]
    assert end.by == "incomplete_silence"


def test_the_rule_before_lets_an_unsure_sound_end_the_pause_while_words_are_on_their_way() -> None:
    """``words_hold_any_sound = false`` (the benchmarks' "before"): the same unsure pause as above is
    cut by end_silence_ms (500 ms) before the words come; a finished-sounding one still waits."""
    ep = Endpointer(EndpointerParams(words_hold_any_sound=False))
    pause, check = _pause(ep)
    ep.expect_text(pause)
    assert ep.verdict(check, 0.5) == []
    (end,) = [e for e in feed_all(ep, [OFF] * 20) if e.kind is EventKind.ENDPOINT]
    assert end.by == "silence"
    assert end.time_s - (end.speech_end_s or 0.0) == pytest.approx(0.5, abs=0.04)
    finished = Endpointer(EndpointerParams(words_hold_any_sound=False))
    pause, check = _pause(finished)
    finished.expect_text(pause)
    assert finished.verdict(check, 0.99) == []  # sounds finished: waits for the words
    assert finished.text_verdict(pause, 0.99)[0].by == "fused"


def test_an_unsure_sound_ends_the_moment_finished_words_arrive() -> None:
    ep = _shipped_with_words()
    pause, check = _pause(ep)
    ep.expect_text(pause)
    assert ep.verdict(check, 0.5) == []
    assert [e for e in feed_all(ep, [OFF] * 20) if e.kind is EventKind.ENDPOINT] == []
    (end,) = ep.text_verdict(pause, 0.6)
    assert end.by == "fused"  # at once, when the words came: 800 ms into the pause here


def test_expected_words_that_never_come_leave_an_unsure_sound_to_decide_after_words_wait() -> None:
    ep = _shipped_with_words()
    pause, check = _pause(ep)
    ep.expect_text(pause)
    assert ep.verdict(check, 0.5) == []
    events = feed_all(ep, [OFF] * 60)
    (end,) = [e for e in events if e.kind is EventKind.ENDPOINT]
    assert end.by == "silence"
    waited = end.time_s - (end.speech_end_s or 0.0)
    assert waited == pytest.approx(0.16 + 1.0, abs=0.04)  # the verdict at turn_check, then words_wait


def test_without_expected_words_the_sound_decides_exactly_as_before() -> None:
    for judged in (False, True):
        ep = smart(judge_words=judged)
        _pause_id, check = _pause(ep)
        (end,) = ep.verdict(check, 0.95)  # nothing expected: no wait
        assert end.by == "smart_turn"


def test_a_words_verdict_for_a_pause_that_is_over_is_ignored() -> None:
    ep = smart(judge_words=True)
    pause, _check = _pause(ep, frames=2)
    ep.expect_text(pause)
    assert [e.kind for e in feed_all(ep, [ON])] == [EventKind.RESUMED]
    assert ep.text_verdict(pause, 0.99) == []  # the person spoke again
    next_pause, _ = _pause(ep, frames=2)
    assert next_pause != pause and ep.verdicts.text is None


def test_the_sound_is_asked_again_as_the_silence_grows() -> None:
    ep = smart(turn_recheck_ms=256)
    _pause_id, first = _pause(ep)
    assert ep.verdict(first, 0.02) == []  # unfinished: the long silence
    events = feed_all(ep, [OFF] * 8)
    (second,) = [e for e in events if e.kind is EventKind.TURN_CHECK]
    assert second.check_id != first
    assert ep.verdict(first, 0.99) == []  # a stale answer to the first check
    (end,) = ep.verdict(second.check_id, 0.95)
    assert end.by == "smart_turn"


def test_the_words_thresholds_are_checked() -> None:
    with pytest.raises(ValueError, match="words_incomplete_threshold"):
        EndpointerParams(words_complete_threshold=0.1, words_incomplete_threshold=0.2)
    with pytest.raises(ValueError, match="words_unsure_silence_ms"):
        EndpointerParams(words_unsure_silence_ms=-1000)


def test_unsure_words_let_a_sure_sound_end_the_pause_and_wait_otherwise() -> None:
    """Words between the thresholds ("Drop the two when you add the figures": P 0.3) neither hold nor
    end: a sure sound ends the turn; an unsure one waits words_unsure_silence_ms."""
    ep = smart(judge_words=True, words_unsure_silence_ms=1000, turn_complete_threshold=0.9)
    pause, check = _pause(ep)
    ep.expect_text(pause)
    assert ep.text_verdict(pause, 0.3) == []
    (end,) = ep.verdict(check, 0.95)
    assert end.by == "fused"
    ep = smart(judge_words=True, words_unsure_silence_ms=1000, turn_complete_threshold=0.9)
    pause, check = _pause(ep)
    ep.expect_text(pause)
    assert ep.text_verdict(pause, 0.3) == [] and ep.verdict(check, 0.6) == []
    (end,) = [e for e in feed_all(ep, [OFF] * 40) if e.kind is EventKind.ENDPOINT]
    assert end.by == "silence" and end.time_s - (end.speech_end_s or 0.0) == pytest.approx(1.0, abs=0.04)
