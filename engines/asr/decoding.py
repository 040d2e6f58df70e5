"""Greedy decoding over the encoder/decoder graph runners: no timestamps, one utterance at a time."""

from __future__ import annotations

import threading
import zlib
from dataclasses import dataclass

import numpy as np

from engines.asr.config import WhisperConfig
from engines.asr.runner import GraphRunner


@dataclass(frozen=True)
class Decoded:
    tokens: tuple[int, ...]  # generated tokens, without the prompt and the end-of-text token
    hit_token_limit: bool
    logprob_sum: float = 0.0  # log probability of each token chosen, end-of-text included
    scored: int = 0  # ... how many tokens that sums
    no_speech_p: float | None = None  # the model's probability that no one speaks (Whisper's own)
    looped: bool = False  # stopped because the text began repeating itself (``repeating_tail``)


class GreedyDecoder:
    def __init__(self, config: WhisperConfig, decoder: GraphRunner) -> None:
        self.decoder = decoder
        dims = config.dims
        self.n_layer = dims["n_text_layer"]
        self.n_head = dims["n_text_head"]
        self.head_dim = dims["n_text_state"] // self.n_head
        self.n_text_ctx = dims["n_text_ctx"]
        vocab = dims["n_vocab"]
        self.eot = int(config.special["eot"])
        self.sot = int(config.special["sot"])
        # Without timestamps only text tokens and end-of-text may follow: every other special token
        # (language, task, timestamps) is masked, as are the model's own suppressed tokens.
        always = np.zeros(vocab, dtype=bool)
        always[self.eot + 1 :] = True
        always[[t for t in config.suppress_ids if 0 <= t < vocab]] = True
        self._suppress_always = always
        begin = always.copy()
        begin[[t for t in config.suppress_ids_begin if 0 <= t < vocab]] = True
        begin[self.eot] = True  # a transcript is never empty when decoding starts
        self._suppress_begin = begin
        self._cache_dtype = decoder.input_dtype("self_k_0")

    def empty_cache(self, batch: int = 1) -> dict[str, np.ndarray]:
        shape = (batch, self.n_head, 0, self.head_dim)
        empty = np.zeros(shape, dtype=self._cache_dtype)
        return {f"self_{kind}_{i}": empty for i in range(self.n_layer) for kind in ("k", "v")}

    def decode(
        self,
        cross: dict[str, np.ndarray],
        prompt: list[int],
        max_new_tokens: int = 224,
        *,
        stop_on_loop: bool = False,
        cancel: threading.Event | None = None,
        no_speech: int | None = None,
    ) -> Decoded:
        """``cross``: the encoder's outputs (cross_k_i / cross_v_i) for one utterance.

        ``stop_on_loop``: give up as soon as the text repeats itself (``repeating_tail``), reported like
        reaching the token limit, so a caller with a fallback does not pay for 224 looping steps.
        ``no_speech``: the no-speech token's id; the start-of-transcript token is then run on its own
        (one more decoder step) to read the probability of it following, as Whisper does.
        """
        limit = min(max_new_tokens, self.n_text_ctx - len(prompt))
        caches = self.empty_cache()
        no_speech_p = None
        if no_speech is not None and len(prompt) > 1:
            # Up to the start of the transcript (after any text given as before it): the no-speech
            # token is read where it would follow.
            head = prompt.index(self.sot) + 1 if self.sot in prompt else 1
            outputs = self.decoder.run(
                {"tokens": np.asarray([prompt[:head]], dtype=np.int64), **caches, **cross}, cancel
            )
            no_speech_p = float(np.exp(_log_softmax_at(outputs["logits"][0].astype(np.float32), no_speech)))
            caches = {name: outputs[f"new_{name}"] for name in caches}
            prompt = prompt[head:]
        step_tokens = np.asarray([prompt], dtype=np.int64)
        generated: list[int] = []
        logprob_sum = 0.0

        def done(hit_limit: bool, looped: bool = False) -> Decoded:
            scored = len(generated) + (0 if hit_limit else 1)
            return Decoded(tuple(generated), hit_limit, logprob_sum, scored, no_speech_p, looped)

        while len(generated) < limit:
            outputs = self.decoder.run({"tokens": step_tokens, **caches, **cross}, cancel)
            logits = outputs["logits"][0].astype(np.float32, copy=False)
            mask = self._suppress_begin if not generated else self._suppress_always
            masked = np.where(mask, -np.inf, logits)
            token = int(np.argmax(masked))
            logprob_sum += _log_softmax_at(masked, token)
            if token == self.eot:
                return done(hit_limit=False)
            generated.append(token)
            if stop_on_loop and repeating_tail(generated):
                return done(hit_limit=True, looped=True)
            caches = {name: outputs[f"new_{name}"] for name in caches}
            step_tokens = np.asarray([[token]], dtype=np.int64)
        return done(hit_limit=True)


def _log_softmax_at(logits: np.ndarray, index: int) -> float:
    top = float(np.max(logits))
    return float(logits[index]) - top - float(np.log(np.sum(np.exp(logits - top))))


def compression_ratio(text: str) -> float:
    """Bytes of text over bytes compressed: repetition loops compress far better than speech."""
    data = text.encode("utf-8")
    return len(data) / max(1, len(zlib.compress(data)))


def without_repeats(tokens: tuple[int, ...], *, max_period: int = 12) -> tuple[int, ...]:
    """``tokens`` with a repetition loop at its end cut to one copy of the repeated pattern (what the
    person most likely said once): the last resort when no other decoding gives a sane transcript."""
    best = tokens
    for period in range(1, max_period + 1):
        end = len(tokens)
        while end - 2 * period >= 0 and tokens[end - period : end] == tokens[end - 2 * period : end - period]:
            end -= period
        # tokens[end - period : end] is the pattern's first copy; two copies or more after it: a loop
        if len(tokens) - end >= period * 2 and end < len(best):
            best = tokens[:end]
    return best


def repeating_tail(
    tokens: list[int], *, min_repeats: int = 4, min_tokens: int = 16, max_period: int = 12
) -> bool:
    """True when the sequence ends in one pattern of up to ``max_period`` tokens repeated back to back
    at least ``min_repeats`` times over at least ``min_tokens`` tokens: Whisper's repetition loop."""
    for period in range(1, max_period + 1):
        span = max(period * min_repeats, min_tokens)
        span -= span % period
        if len(tokens) < span:
            continue
        tail = tokens[-span:]
        if all(tail[i] == tail[i % period] for i in range(span)):
            return True
    return False
