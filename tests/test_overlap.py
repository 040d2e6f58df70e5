"""Speech over a reply, without models: what the words decide, and a paused reply going on from
the sample where it stopped."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from appliance.audio.files import MemorySink
from appliance.pipeline.overlap import NOT_TRANSCRIBED, Heard, OverlapKind, classify
from appliance.pipeline.params import OverlapParams
from appliance.pipeline.playback import Player
from engines.vad.endpointer import Endpointer, EventKind
from engines.vad.params import EndpointerParams

PARAMS = OverlapParams()


@pytest.mark.parametrize(
    "heard",
    ["Mm-hmm.", "Uh-huh.", "Yeah.", "Okay.", "Right.", "Sure!", "Yes, yes.", "Oh, okay.", "I see.", "(laughs)",
     "[COUGHING]", "", " you", "Ha ha!", "MMM.", "M.H.M.", "Mmmhmm"],
)  # fmt: skip
def test_an_acknowledgement_is_a_backchannel(heard: str) -> None:
    assert classify(Heard(heard, -0.2), PARAMS) is OverlapKind.BACKCHANNEL


@pytest.mark.parametrize(
    "heard", ["Stop.", "Wait.", "Hold on!", "No.", "No, no.", "Oh, wait.", "Okay, stop."]
)
def test_a_stop_word_stops_without_a_question(heard: str) -> None:
    assert classify(Heard(heard, -0.2), PARAMS) is OverlapKind.STOP_WORD
    assert classify(Heard(heard, -0.9), PARAMS) is OverlapKind.STOP_WORD  # unsure, but its words say so


@pytest.mark.parametrize(
    "heard",
    ["What time does the canteen open?", "No, I meant the one in London.", "Stop, what about parking?",
     "Yes, but how long is it?", "Hold", "What?", "Why?"],
)  # fmt: skip
def test_anything_else_is_an_interruption(heard: str) -> None:
    assert classify(Heard(heard, -0.3), PARAMS) is OverlapKind.INTERRUPTION
    assert classify(Heard(heard), PARAMS) is OverlapKind.INTERRUPTION  # no confidence given


def test_words_not_transcribed_are_an_interruption() -> None:
    assert classify(NOT_TRANSCRIBED, PARAMS) is OverlapKind.INTERRUPTION


@pytest.mark.parametrize("heard", ["in my mom.", "And I'm on.", "MMO", "picture."])
def test_a_few_words_made_up_for_a_hum_are_a_backchannel(heard: str) -> None:
    """What Whisper tiny.en wrote for Piper's "mm-hmm", "hmm" and "sure", each below -0.65."""
    assert classify(Heard(heard, -0.8), PARAMS) is OverlapKind.BACKCHANNEL
    assert classify(Heard(heard, -0.5), PARAMS) is OverlapKind.INTERRUPTION  # said with confidence
    assert classify(Heard(heard, -0.8), OverlapParams(unsure_logprob=None)) is OverlapKind.INTERRUPTION


def test_an_unsure_question_of_more_words_still_interrupts() -> None:
    assert classify(Heard("what time does it open", -1.2), PARAMS) is OverlapKind.INTERRUPTION


def test_a_site_chooses_its_own_words() -> None:
    params = OverlapParams(backchannels=("genau",), stop_words=("halt",))
    assert classify(Heard("Genau."), params) is OverlapKind.BACKCHANNEL
    assert classify(Heard("Halt!"), params) is OverlapKind.STOP_WORD
    assert classify(Heard("Okay."), params) is OverlapKind.INTERRUPTION


def test_a_dismissed_utterance_ends_without_an_endpoint() -> None:
    endpointer = Endpointer(EndpointerParams(mode="silence"), threshold=0.5)
    events = [e for _ in range(5) for e in endpointer.feed(0.9, 0.032)]
    assert [e.kind for e in events] == [EventKind.SPEECH_START]
    endpointer.dismiss()
    assert not endpointer.in_speech
    assert [e for _ in range(40) for e in endpointer.feed(0.0, 0.032)] == []
    again = [e.kind for _ in range(5) for e in endpointer.feed(0.9, 0.032)]
    assert again == [EventKind.SPEECH_START]


class _Speaker(MemorySink):
    """A real-time sink that notes where each flush fell among the samples written."""

    def __init__(self) -> None:
        super().__init__(16000, realtime=True)
        self.flushed_after: list[int] = []

    async def flush(self) -> None:
        self.flushed_after.append(sum(len(c) for c in self._chunks))
        await super().flush()


def test_a_paused_reply_goes_on_from_the_first_sample_not_heard() -> None:
    async def scenario() -> tuple[Player, _Speaker, int, np.ndarray]:
        sink = _Speaker()
        player = Player(sink)
        audio = np.arange(16000, dtype=np.float32) / 16000  # one second: each sample says where it is
        playing = asyncio.create_task(player.play(audio, 0))
        await asyncio.sleep(0.3)
        assert await player.pause()
        heard = player.played_samples
        assert not player.playing and player.paused
        await asyncio.sleep(0.2)
        assert player.played_samples == heard  # nothing is heard while paused
        await player.resume()
        await playing
        await player.drain()
        return player, sink, heard, audio

    player, sink, heard, audio = asyncio.run(scenario())
    written = sink.audio
    after_pause = written[sink.flushed_after[0] :]
    assert 0.25 * 16000 <= heard <= 0.4 * 16000
    np.testing.assert_array_equal(after_pause, audio[heard:])  # the rest, once, from where it stopped
    assert player.played_samples == len(audio)
    assert player.pauses == 1 and 0.15 <= player.paused_s <= 0.5


def test_a_stop_while_paused_ends_the_reply_where_it_was_heard() -> None:
    async def scenario() -> tuple[Player, int]:
        player = Player(_Speaker())
        playing = asyncio.create_task(player.play(np.zeros(16000, np.float32), 0))
        await asyncio.sleep(0.2)
        await player.pause()
        heard = player.played_samples
        await player.stop()
        await asyncio.wait_for(playing, 1.0)  # the writer is let go
        await asyncio.wait_for(player.drain(), 1.0)
        return player, heard

    player, heard = asyncio.run(scenario())
    assert player.played_samples == heard and not player.playing and not player.paused


def test_a_file_is_never_paused() -> None:
    async def scenario() -> bool:
        player = Player(MemorySink(16000))
        await player.play(np.zeros(1600, np.float32), 0)
        return await player.pause()

    assert not asyncio.run(scenario())
