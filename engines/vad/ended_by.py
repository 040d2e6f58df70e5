"""What ended a turn: the endpointer's decision on a pause, or, for a turn without speech, what
opened it on a call."""

from __future__ import annotations

from engines.labels import Label


class EndedBy(Label):
    # The endpointer (engines/vad/endpointer.py) on a pause:
    SILENCE = "silence"  # the silence of endpointer.end_silence_ms (or the words' unsure hold)
    SMART_TURN = "smart_turn"  # the sound judged the utterance complete
    FUSED = "fused"  # the words and the sound together
    TEXT = "text"  # the words alone (the sound's check failed)
    INCOMPLETE_SILENCE = "incomplete_silence"  # the long silence after an unfinished or missing verdict
    MAX_LENGTH = "max_length"  # endpointer.max_utterance_s
    STREAM_END = "stream_end"  # the audio ended mid-utterance
    # Turns without speech, on a call:
    GREETING = "greeting"  # call.greeting, said when the call is answered
    KEYPAD = "keypad"  # keys typed, ended by # or a pause
    OPERATOR_KEY = "operator_key"  # the operator digit: the caller is put through
    SILENCE_PROMPT = "silence_prompt"  # the caller was quiet: asked whether anyone is there
    TRANSFER_FAILED = "transfer_failed"  # the caller is told a transfer did not go through
