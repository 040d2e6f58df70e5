"""Every label a turn's record carries out of the pipeline, to the store, /metrics, the admin page's
schema and the docs: one enum each (``tests/test_labels.py`` fails on a label emitted as a plain
string, or one that /metrics, the schema or the page does not know)."""

from __future__ import annotations

from engines.labels import Label
from engines.vad.ended_by import EndedBy

__all__ = [
    "EndedBy",
    "Judge",
    "OpenedBy",
    "OverlapKind",
    "SessionKind",
    "SessionState",
    "Stage",
    "TurnCheck",
    "TurnOutcome",
    "WordsNotExpected",
]


class WordsNotExpected(Label):
    """Why a turn's pause was decided without the words' verdict (endpointer.judge_words): the sound
    alone decided it. Counted on /metrics, so a site sees how often its turns were."""

    OFF = "off"  # endpointer.mode is silence, or judge_words is false
    MODEL_CANNOT = "model_cannot"  # no chat template to read the verdict from, or a site server
    LLM_BUSY = "llm_busy"  # answering another session: our prompt's pass would wait behind it
    NO_PAUSE = "no_pause"  # the turn started at the endpoint itself (after our reply was cut)


class TurnOutcome(Label):
    """How a turn ended, as the admin page shows it. The record stores only the last two itself
    (``TurnTrace.outcome``); the others follow from its error and cancelled fields."""

    ANSWERED = "answered"
    INTERRUPTED = "interrupted"  # the person spoke (or typed) over the reply
    ERROR = "error"
    HANGUP = "hangup"  # the call ended during the reply
    STOPPED = "stopped"  # the session was stopped during it (the daemon shutting down)


class TurnCheck(Label):
    """The turn detector's checks of a turn's pauses, as /metrics counts them."""

    CHECKED = "checked"  # asked
    UNFINISHED = "unfinished"  # said the utterance was unfinished
    FAILED = "failed"  # could not answer (the sound's timers decided)


class Judge(Label):
    """Who gave an end-of-turn verdict on a pause."""

    SOUND = "sound"  # the turn detector (Smart Turn) on the audio
    WORDS = "words"  # the reply's language model on the transcript


class Stage(Label):
    """The engine stage of a turn that failed: its error code is ``<stage>-failed`` (``llm-failed``)."""

    ASR = "asr"
    LLM = "llm"
    TTS = "tts"
    PLAYBACK = "playback"


class OverlapKind(Label):
    """What someone's speech over a reply was taken for (appliance/pipeline/overlap.py)."""

    BACKCHANNEL = "backchannel"  # the reply went on
    STOP_WORD = "stop_word"  # the reply stopped; nothing was answered
    INTERRUPTION = "interruption"  # the reply stopped; what the person said was the next turn


class SessionKind(Label):
    """What a live session listens to, as the admin page lists it."""

    MICROPHONE = "microphone"
    SIP = "sip"  # a phone call
    FILE = "file"
    DEMO = "demo"  # no microphone: one spoken question answered at the start


class SessionState(Label):
    """What a live session is doing, as the admin page shows it."""

    IDLE = "idle"  # not started yet
    LISTENING = "listening"
    THINKING = "thinking"  # a turn running
    SPEAKING = "speaking"  # a reply playing
    WAITING_FOR_WAKE_WORD = "waiting for the wake word"  # wake.activation = wake_word, nobody addressing it


class OpenedBy(Label):
    """What let speech begin a turn (``[wake]``, appliance/pipeline/activation.py)."""

    ALWAYS = "always"  # wake.activation = always
    WAKE_WORD = "wake_word"  # the wake word, within wake.listen_ms before the speech
    FOLLOW_UP = "follow_up"  # within wake.follow_up_ms of the last turn
    ANSWERING = "answering"  # over a turn still running or a reply playing (a barge-in)
