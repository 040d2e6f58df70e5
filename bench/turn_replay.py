"""The end-of-turn benchmark's replay: an endpointer fed a clip's VAD frames with the judges'
verdicts delivered when they would come, and the outcome summarized (pauses cut, endpoint wait)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.turn_set import FUNCTION_WORDS, Clip

FRAME_SAMPLES = 512
FRAME_S = FRAME_SAMPLES / 16000
# A pause shorter than this is over before any words' verdict could come (ASR alone takes longer).
MIN_WORDS_PAUSE_S = 0.12
BASELINE_UNFINISHED, BASELINE_FINISHED = 0.02, 0.9


@dataclass(frozen=True)
class WordsVerdict:
    transcript: str
    llm_p: float | None
    baseline_p: float
    cost_s: float  # ASR + the LLM's evaluation of the words it had not seen


class Judges:
    """The real models, each answer measured once and cached per (clip, audio span)."""

    def __init__(self, clips: list[np.ndarray], detector: Any, asr: Any, llm: Any) -> None:
        self.clips, self.detector, self.asr, self.llm = clips, detector, asr, llm
        self._audio: dict[tuple[int, int, int], tuple[float, float]] = {}
        self._words: dict[tuple[int, int, int], WordsVerdict] = {}
        self.audio_ms: list[float] = []
        self.words_ms: list[float] = []

    def audio(self, index: int, start: int, end: int) -> tuple[float, float]:
        key = (index, start, end)
        if key not in self._audio:
            started = time.perf_counter()
            probability = self.detector.complete_probability(self.clips[index][start:end])
            cost = time.perf_counter() - started
            self.audio_ms.append(cost * 1000.0)
            self._audio[key] = (probability, cost)
        return self._audio[key]

    def words(self, index: int, start: int, end: int) -> WordsVerdict:
        key = (index, start, end)
        if key not in self._words:
            self._words[key] = self._judge_words(index, start, end)
            self.words_ms.append(self._words[key].cost_s * 1000.0)
        return self._words[key]

    def _judge_words(self, index: int, start: int, end: int) -> WordsVerdict:
        from engines.llm import Message
        from engines.llm.llamacpp import judged_words

        started = time.perf_counter()
        transcript = self.asr.transcribe(self.clips[index][start:end]).text.strip()
        asr_s = time.perf_counter() - started
        words = judged_words(transcript)  # as the engine judges them
        last = words.split()[-1].strip("\"'").lower() if words.split() else ""
        baseline = BASELINE_UNFINISHED if last in FUNCTION_WORDS else BASELINE_FINISHED
        if not words:
            return WordsVerdict(transcript, None, baseline, asr_s)
        conversation = f"clip-{index}"
        primer = " ".join(words.split()[:-2])
        if primer:
            self.llm.prefill([Message("user", primer)], conversation=conversation)
        started = time.perf_counter()
        stats = self.llm.prefill([Message("user", words)], conversation=conversation)
        return WordsVerdict(
            transcript, stats.end_of_message_p, baseline, asr_s + time.perf_counter() - started
        )


@dataclass(frozen=True)
class Ending:
    time_s: float  # stream time of the endpoint decision
    speech_end_s: float
    by: str
    wait_ms: float  # last voiced frame -> endpoint, the models' costs included


@dataclass(frozen=True)
class Outcome:
    endings: tuple[Ending, ...]
    checks: int

    @property
    def split(self) -> bool:
        return len(self.endings) > 1

    def cut_at(self, clip: Clip) -> bool:
        """A turn ended inside the inserted pause (not at one of the recording's own pauses)."""
        if clip.pause_start_s is None or clip.pause_end_s is None:
            return False
        return any(
            abs(e.speech_end_s - clip.pause_start_s) <= 0.15 and e.time_s <= clip.pause_end_s + FRAME_S
            for e in self.endings
        )


Words = Callable[[int, int, int], tuple[float | None, float]]  # (clip, start, end) -> (p, cost)


def replay(
    clip_index: int, probabilities: list[float], params: Any, judges: Judges, words: Words | None
) -> Outcome:
    """One clip through the endpointer, each verdict delivered at the stream time it would arrive."""
    from engines.vad.endpointer import Endpointer, EndpointEvent, EventKind

    endpointer = Endpointer(params)
    endings: list[Ending] = []
    pending: list[tuple[float, str, int, float | None]] = []  # (due, "audio"|"words", id, p)
    checks = 0

    def voiced_again_s(time_s: float) -> float:
        frame = round(time_s / FRAME_S)
        later = [i for i, p in enumerate(probabilities[frame:], frame) if p >= endpointer.threshold]
        return later[0] * FRAME_S if later else float("inf")

    def handle(events: list[EndpointEvent], stamp: float | None = None) -> None:
        nonlocal checks
        for event in events:
            if event.kind is EventKind.ENDPOINT:
                assert event.speech_end_s is not None
                at = event.time_s if stamp is None else stamp
                endings.append(
                    Ending(at, event.speech_end_s, str(event.by), (at - event.speech_end_s) * 1000.0)
                )
                pending.clear()
            elif event.kind is EventKind.TURN_CHECK:
                start, end = int(event.utterance_start_s * 16000), round(event.time_s * 16000)
                probability, cost = judges.audio(clip_index, start, end)
                checks += 1
                pending.append((event.time_s + cost, "audio", event.check_id, probability))
            elif event.kind is EventKind.PROBABLY_ENDED and words is not None:
                if voiced_again_s(event.time_s) - event.time_s < MIN_WORDS_PAUSE_S:
                    continue  # over before any verdict could come: the endpointer would ignore it
                endpointer.expect_text(event.pause_id)
                start, end = int(event.utterance_start_s * 16000), round(event.time_s * 16000)
                said, cost = words(clip_index, start, end)
                pending.append((event.time_s + cost, "words", event.pause_id, said))

    def deliver(until_s: float) -> None:
        while True:
            due = sorted((item for item in pending if item[0] <= until_s), key=lambda item: item[0])
            if not due:
                return
            at, kind, ident, probability = due[0]
            pending.remove(due[0])
            if kind == "audio":
                handle(endpointer.verdict(ident, probability), stamp=at)
            else:
                handle(endpointer.text_verdict(ident, probability), stamp=at)

    for probability in probabilities:
        deliver(endpointer.time_s)
        handle(endpointer.feed(probability, FRAME_S))
    deliver(float("inf"))
    handle(endpointer.finish())
    return Outcome(tuple(endings), checks)


def vad_probabilities(vad: Any, audio: np.ndarray) -> list[float]:
    stream = vad.stream()
    frames = len(audio) // FRAME_SAMPLES
    return [stream.probability(audio[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES]) for i in range(frames)]


def last_voiced_end(probabilities: list[float], threshold: float) -> float:
    """Where speech ends in a clip (s): the end of its last voiced frame."""
    voiced = [i for i, p in enumerate(probabilities) if p >= threshold]
    return (voiced[-1] + 1) * FRAME_S if voiced else 0.0


def _stats(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    array = np.asarray(values)
    return {
        "count": int(array.size),
        "p50": round(float(np.percentile(array, 50)), 1),
        "p95": round(float(np.percentile(array, 95)), 1),
        "p99": round(float(np.percentile(array, 99)), 1),
        "max": round(float(array.max()), 1),
    }


def _share(flags: list[bool]) -> float | None:
    return round(sum(flags) / len(flags), 3) if flags else None


def summarize(clips: list[Clip], outcomes: list[Outcome]) -> dict[str, Any]:
    pairs = list(zip(clips, outcomes, strict=True))
    complete = [(c, o) for c, o in pairs if not c.paused]
    paused = [(c, o) for c, o in pairs if c.paused]
    return {
        "complete_wait_ms": _stats([o.endings[-1].wait_ms for _c, o in complete if o.endings]),
        "complete_split": _share([o.split for _c, o in complete]),
        "pauses_cut": _share([o.cut_at(c) for c, o in paused]),
        "pauses_500_900_cut": _share([o.cut_at(c) for c, o in paused if 0.5 <= c.pause_s <= 0.9]),
        "function_word_pauses_cut": _share([o.cut_at(c) for c, o in paused if c.kind == "pause_function"]),
        "other_pauses_cut": _share([o.cut_at(c) for c, o in paused if c.kind == "pause_other"]),
        "cut": sorted(f"{c.name} after {c.cut_after!r}" for c, o in paused if o.cut_at(c)),
        "ended_by": dict(Counter(e.by for _c, o in pairs for e in o.endings)),
        "checks": sum(o.checks for _c, o in pairs),
    }
