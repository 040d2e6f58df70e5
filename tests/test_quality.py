"""Output quality signals of a turn, and their summary per bundle version."""

from __future__ import annotations

from appliance.quality import by_version, said_again, signals
from appliance.trace import TurnTrace


def _turn(
    transcript: str = "where is the loading dock", reply: str = "Behind building two.", **fields: object
) -> TurnTrace:
    trace = TurnTrace(turn_id="t", session_id="s", transcript=transcript, reply=reply)
    for name, value in fields.items():
        setattr(trace, name, value)
    return trace


def test_saying_it_again_is_a_repetition_and_short_answers_are_not() -> None:
    assert said_again("Where is the loading dock?", "where's the loading dock")
    assert said_again("where is the loading dock please", "where is the loading dock")
    assert not said_again("yes", "yes")  # an answer, not a repetition
    assert not said_again("when does the loading dock open", "where is the reception desk")
    assert not said_again("where is the loading dock", "")


def test_each_signal_is_read_from_the_trace() -> None:
    assert signals(_turn()) == []
    assert signals(_turn(transcript="")) == []  # nothing heard: nothing to judge
    assert signals(_turn(asr_avg_logprob=-1.2)) == ["unsure"]
    assert signals(_turn(asr_avg_logprob=-0.4, asr_no_speech_p=0.8)) == ["unsure"]
    assert signals(_turn(repeated=True)) == ["repeated"]
    assert signals(_turn(cancelled=True)) == ["barge_in"]
    assert signals(_turn(cancelled=True, outcome="hangup")) == []  # the caller left: not a barge-in
    assert signals(_turn(tool_calls=["lookup_fact", "http_get:timed out"])) == ["tool_failed"]
    assert signals(_turn(error="llm: failed", reply="")) == ["fallback"]
    assert signals(_turn(reply="")) == ["empty"]


def test_the_summary_is_per_version_with_mean_confidence() -> None:
    traces = [
        _turn(bundle_version="b", asr_avg_logprob=-1.5, asr_no_speech_p=0.1),
        _turn(bundle_version="a", asr_avg_logprob=-0.2),
        _turn(bundle_version="b", asr_avg_logprob=-0.5, repeated=True),
        _turn(bundle_version="b", transcript=""),
    ]
    newest, older = by_version(traces)
    assert (newest.version, newest.turns, newest.avg_logprob, newest.no_speech_p) == ("b", 2, -1.0, 0.1)
    assert newest.counts["unsure"] == 1 and newest.share("repeated") == 0.5
    assert (older.version, older.turns, sum(older.counts.values())) == ("a", 1, 0)
