"""The VAD's settings (``[vad]``) and the endpointer's (``[endpointer]``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from engines.labels import Label
from engines.params import Params, ms_to_s


class VadParams(Params):
    """Silero VAD: which frames are speech."""

    backend: Literal["onnxruntime", "torch"] = Field("onnxruntime", description="onnxruntime | torch")
    device: Literal["cpu", "cuda"] = Field(
        "cpu", description="torch backend only; onnxruntime runs on the CPU"
    )
    threshold: float = Field(0.5, gt=0.0, lt=1.0, description="speech probability at which a frame is voiced")
    threads: int | None = Field(
        None,
        ge=1,
        le=64,
        description="onnxruntime: intra-op threads (unset = 1); torch: its process-wide thread count "
        "(unset = left as it is; 1 is fastest for this tiny model on a busy CPU)",
    )


class EndpointerMode(Label):
    """How a turn's end is decided (``endpointer.mode``)."""

    SILENCE = "silence"  # end_silence_ms of silence
    SMART_TURN = "smart_turn"  # the Smart Turn model (and the reply's LLM) judge each pause


class EndpointerParams(Params):
    """The end of a turn: how long a silence, and what judges whether the words are complete."""

    # The VAD's threshold (vad.threshold) is the endpointer's own argument: the session raises it while a
    # reply plays.

    mode: EndpointerMode = Field(
        EndpointerMode.SMART_TURN,
        description="silence: a turn ends after end_silence_ms of silence; smart_turn: after "
        "turn_check_ms the Smart Turn model judges how likely the utterance is finished: sure "
        "(turn_complete_threshold) ends it at once, sure it is not (below turn_incomplete_threshold) "
        "waits incomplete_silence_ms, unsure waits end_silence_ms (docs/turn-taking.md)",
    )
    min_speech_ms: int = Field(96, ge=0, le=2000, description="voiced time that starts an utterance")
    end_silence_ms: int = Field(
        500,
        ge=64,
        le=5000,
        description="silence mode; smart_turn when the sound alone is unsure (or the model fails)",
    )
    turn_check_ms: int = Field(
        160, ge=32, le=2000, description="smart_turn: silence before the Smart Turn model is asked"
    )
    incomplete_silence_ms: int = Field(
        1000, ge=200, le=10000, description="smart_turn: silence that ends a turn judged unfinished"
    )
    turn_complete_threshold: float = Field(
        0.9, gt=0.0, lt=1.0, description="the sound alone: at or above it the turn ends at once"
    )
    turn_incomplete_threshold: float = Field(
        0.05,
        gt=0.0,
        lt=1.0,
        description="the sound alone: below it, incomplete_silence_ms; in between, end_silence_ms",
    )
    turn_recheck_ms: int = Field(
        0,
        ge=0,
        le=2000,
        description="smart_turn: ask the sound again this often while a pause lasts (0: once)",
    )
    judge_words: bool = Field(
        True,
        description="smart_turn: the reply's language model also judges from the words whether the person "
        "has finished, read from the logits it computes for the reply anyway (llama.cpp with the model's "
        "own chat template and no other call's reply running; otherwise the sound decides alone)",
    )
    words_complete_threshold: float = Field(
        0.35,
        gt=0.0,
        lt=1.0,
        description="judge_words: words at or above it end the turn at once (so does a sure sound, "
        "unless the words say unfinished)",
    )
    words_incomplete_threshold: float = Field(
        0.02,
        gt=0.0,
        lt=1.0,
        description="judge_words: words below it keep listening up to words_incomplete_silence_ms, "
        "whatever the sound says",
    )
    words_incomplete_silence_ms: int = Field(
        2000,
        ge=200,
        le=10000,
        description='judge_words: silence that ends a turn whose words are unfinished ("... out of the")',
    )
    words_unsure_silence_ms: int = Field(
        1000,
        ge=64,
        le=10000,
        description="judge_words: silence that ends a turn when neither the words nor the sound is sure",
    )
    words_wait_ms: int = Field(
        1000, ge=0, le=2000, description="judge_words: how long a finished-sounding pause waits for the words"
    )
    words_hold_any_sound: bool = Field(
        True,
        description="judge_words: the expected words hold the pause whatever the sound says; false: the "
        "rule before December 2026, where an unsure sound's own silence could end it first (benchmarks)",
    )
    pre_roll_ms: int = Field(256, ge=0, le=2000, description="audio kept from before the speech start")
    max_utterance_s: float = Field(20.0, gt=1.0, le=60.0, description="an utterance this long is ended")

    @model_validator(mode="after")
    def _check_order(self) -> EndpointerParams:
        if self.incomplete_silence_ms <= self.turn_check_ms:
            raise ValueError(
                f"incomplete_silence_ms ({self.incomplete_silence_ms}) must be longer than turn_check_ms "
                f"({self.turn_check_ms}): the model is asked before the long silence ends the turn"
            )
        for judge in ("turn", "words"):
            low = getattr(self, f"{judge}_incomplete_threshold")
            high = getattr(self, f"{judge}_complete_threshold")
            if low > high:
                raise ValueError(
                    f"{judge}_incomplete_threshold ({low}) must not be above {judge}_complete_threshold ({high})"
                )
        return self

    @property
    def min_speech_s(self) -> float:
        return ms_to_s(self.min_speech_ms)

    @property
    def end_silence_s(self) -> float:
        return ms_to_s(self.end_silence_ms)

    @property
    def turn_check_s(self) -> float:
        return ms_to_s(self.turn_check_ms)

    @property
    def incomplete_silence_s(self) -> float:
        return ms_to_s(self.incomplete_silence_ms)

    @property
    def turn_recheck_s(self) -> float:
        return ms_to_s(self.turn_recheck_ms)

    @property
    def words_incomplete_silence_s(self) -> float:
        return ms_to_s(self.words_incomplete_silence_ms)

    @property
    def words_unsure_silence_s(self) -> float:
        return ms_to_s(self.words_unsure_silence_ms)

    @property
    def words_wait_s(self) -> float:
        return ms_to_s(self.words_wait_ms)

    @property
    def pre_roll_s(self) -> float:
        return ms_to_s(self.pre_roll_ms)
