"""One turn: ASR -> LLM -> clauses -> TTS -> playback, as one task tree.

The stages overlap through bounded queues: TTS speaks clause 1 while the LLM writes clause 2, and
playback starts with the first audio chunk. A turn may start before the endpoint is confirmed
(speculative start): everything runs, only playback waits for ``confirm()``. Cancelling the task that
runs ``Turn.run`` (barge-in, or the person resumed speaking) stops the LLM within one token, TTS
between chunks and playback within one frame; what was heard stays in ``played_text``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from appliance.grounding import Sources, WithheldWhy
from appliance.pipeline.engines import TurnEngines
from appliance.pipeline.params import ConversationParams
from appliance.pipeline.playback import Player
from appliance.pipeline.tool_round import run_tool_calls
from appliance.pipeline.turn_sources import Grounding, sources_for
from appliance.pipeline.turn_voice import Clauses, TurnFailed, TurnVoice, run_together
from appliance.tools import ToolBox, ToolCall, as_template_text, starts_a_call
from appliance.tools.calls import called_name
from appliance.tools.site_sentences import SiteAnswer, selection_in
from appliance.trace.labels import Stage
from appliance.trace.record import TurnTrace
from engines.asr.text import normalize_text
from engines.llm import GenerationStats, Message
from engines.tts.params import TtsParams

if TYPE_CHECKING:
    from engines.tts.clauses import ClauseSplitter

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TurnConfig:
    replies: ConversationParams = field(default_factory=ConversationParams)
    grounding: Grounding | None = None  # with tools, the tool box's agent settings say
    speech: TtsParams = field(default_factory=TtsParams)  # first_clause_words
    max_pending_clauses: int = 4
    max_pending_chunks: int = 8


class Turn:
    def __init__(
        self,
        *,
        engines: TurnEngines,
        player: Player,
        messages_for: Callable[[str], list[Message]],
        audio_16k: np.ndarray,
        trace: TurnTrace,
        config: TurnConfig,
        tools: ToolBox | None = None,
        on_words: Callable[[float | None], None] | None = None,
        typed: str | None = None,
        say: str | None = None,
        unanswered: Callable[[str], bool] | None = None,
    ) -> None:
        """``on_words``: told (on the event loop, once) the language model's P(the person's words end
        their message), or None when there will be none (no words heard, a failure, a first token
        that came without it). ``unanswered``: words it says are not a turn are dropped once heard
        (the rest of a stop word)."""
        self.engines = engines
        self.typed = typed  # the person's words came as text (keys typed on a keypad): no ASR
        self.say = say  # nothing was heard: only this is said (a prompt to a silent caller)
        self.unanswered = unanswered
        self.transfer_to: str | None = None  # the model asked to put the caller through to this target
        self._on_words = on_words
        self._loop: asyncio.AbstractEventLoop | None = None
        self.tools = tools
        self.player = player
        self.messages_for = messages_for  # the history with a new user message appended
        self.audio_16k = audio_16k
        self.trace = trace
        self.config = config
        self.transcript = ""
        self.voice = TurnVoice(engines, player, trace, max_pending_chunks=config.max_pending_chunks)
        self.stats = GenerationStats()
        self.dropped = False  # a speculative turn abandoned because the person kept talking
        self._llm_cancel = threading.Event()
        self._reply_parts: list[str] = []
        self._sources: Sources | None = None  # what figures may come from (agent.grounding)
        self._withheld = False  # a clause was not spoken: the reply ended with agent.not_known_reply
        self._preamble: asyncio.Task[None] | None = None
        self._preamble_from = 0  # clauses said before the tool call began
        # agent.answers = "select": the model names one of the facts' sentences, which is said as written
        self._selects = tools is not None and tools.site_sentences is not None
        self._picked: int | None = None  # the sentence it named (0: none)
        self._declined = False  # the product declined (nothing chosen, or not what the person named)
        self._sentence: list[str] = []  # free text's clauses held until their sentence is checked whole

    @property
    def confirmed(self) -> bool:
        return self.voice.confirmed

    def confirm(self) -> None:
        """The endpoint is confirmed: playback may start."""
        self.voice.confirm()

    @property
    def played_text(self) -> str:
        return self.voice.played_text

    async def run(self) -> None:
        self.trace.audio_s = len(self.audio_16k) / 16000
        self._loop = asyncio.get_running_loop()
        try:
            await self._respond()
        except asyncio.CancelledError:
            self.trace.cancelled = True
            self._llm_cancel.set()
            await self.player.stop()
            raise
        except TurnFailed as err:
            log.error("turn %s: %s", self.trace.turn_id, err, exc_info=err.__cause__)
            self.trace.error = str(err)
            self._llm_cancel.set()
            await self.voice.speak_fallback(self.config.replies.fallback_reply)
        finally:
            self._no_preamble()
            self._tell_words(None)  # none came (if one did, this does nothing)
            self._llm_cancel.set()
            self.trace.reply = "".join(self._reply_parts).strip()
            self.trace.played_reply = self.played_text
            self.trace.reply_audio_s = self.player.played_samples / self.player.rate
            self.trace.llm_tokens += self.stats.generated_tokens  # (later rounds of a tool turn added theirs)
            self.trace.llm_prompt_tokens = self.stats.prompt_tokens
            self.trace.llm_evaluated_tokens = self.stats.evaluated_prompt_tokens
            self.trace.llm_queued_ms = round(self.stats.queued_s * 1000.0, 1)
            self.trace.prefill_reused = self.stats.prefilled_tokens
            self.trace.llm_backend = self.stats.backend
            if self.tools is not None:
                self.trace.declined = (
                    self._withheld
                    or self._declined
                    or _says(self.trace.reply, self.tools.agent.not_known_reply)
                )
            self.trace.mark("turn_done")

    async def _respond(self) -> None:
        if self.say is not None:
            await self._say_only(self.say)
            return
        self.trace.mark("asr_start")
        if self.typed is not None:
            self.trace.mark("asr_done")
            self.transcript = self.trace.transcript = self.typed
        else:
            await self._transcribe()
        if not self.transcript:
            log.info("turn %s: no words recognised; no reply", self.trace.turn_id)
            return
        if self.unanswered is not None and self.unanswered(self.transcript):
            log.info(
                "turn %s: %r is the rest of a stop word; not a turn", self.trace.turn_id, self.transcript
            )
            self.dropped = True
            return
        clauses: Clauses = asyncio.Queue(self.config.max_pending_clauses)
        messages = self._with_site_facts(self.messages_for(self.transcript))
        await run_together(self._generate(messages, clauses), self.voice.speak(clauses))

    def _with_site_facts(self, messages: list[Message]) -> list[Message]:
        """The facts this question is given, and the sources its reply's figures are checked against."""
        given, self._sources, facts = sources_for(
            messages,
            self.transcript,
            tools=self.tools,
            grounding=self.config.grounding,
            system_prompt=self.engines.llm.system_prompt,
            selects=self._selects,
        )
        if facts is not None:
            self.trace.facts_given = [fact.title or fact.text[:40] for fact in facts]
        return given

    async def _say_only(self, text: str) -> None:
        clauses: Clauses = asyncio.Queue()
        self._reply_parts.append(text)
        await self.voice.put(text, clauses)
        await clauses.put(None)
        await self.voice.speak(clauses)

    @property
    def ends_call(self) -> bool:
        """The model called a tool that ends the call (its goodbye is this turn's reply)."""
        return self.tools is not None and any(self.tools.ends_call(name) for name in self.trace.tool_calls)

    async def _transcribe(self) -> None:
        try:
            result = await self.engines.asr_worker.call(self.engines.asr.transcribe, self.audio_16k)
        except Exception as err:
            raise TurnFailed(Stage.ASR, err) from err
        self.trace.mark("asr_done")
        self.transcript = self.trace.transcript = await self._site_words(result.text.strip())
        self.trace.asr_avg_logprob = _rounded(result.avg_logprob)
        self.trace.asr_no_speech_p = _rounded(result.no_speech_p)
        self.trace.asr_compression_ratio = _rounded(result.compression_ratio)

    async def _site_words(self, heard: str) -> str:
        """``heard`` with the facts' words that Whisper heard as others put back ("meeting room L" ->
        "meeting room Elm"); the phonemes come from the voice's espeak, on its worker."""
        words = self.tools.site_words if self.tools is not None else None
        if words is None or not heard:
            return heard
        unknown = words.unknown(heard)
        if unknown:
            try:
                words.learn(unknown, await self.engines.tts_worker.call(self.engines.tts.phonemes, unknown))
            except Exception:  # the words as heard are still a question
                log.warning(
                    "turn %s: no phonemes for %s; the words stay as heard",
                    self.trace.turn_id,
                    unknown,
                    exc_info=True,
                )
                return heard
        text, corrections = words.correct(heard)
        if corrections:
            self.trace.heard = heard
            self.trace.heard_as = [str(c) for c in corrections]
            log.info(
                "turn %s: heard %r as the site's words: %s",
                self.trace.turn_id,
                heard,
                ", ".join(map(str, corrections)),
            )
        return text

    async def _generate(self, messages: list[Message], clauses: Clauses) -> None:
        from engines.tts.clauses import ClauseSplitter  # the TTS package's splitter (pure, cheap)

        splitter = ClauseSplitter(first_clause_words=self.config.speech.first_clause_words)
        if self.engines.llm.occupancy().full:
            # Every slot is answering another call: say so rather than stay silent for a whole reply.
            self.trace.busy_reply = True
            await self.voice.put(self.config.replies.busy_reply, clauses)
        tools = self.tools if self.tools is not None and self.engines.llm.offers_tools else None
        calls_left = tools.agent.max_tool_calls if tools is not None else 0
        stats = self.stats
        while True:
            call_text = await self._reply_or_call(messages, stats, splitter, clauses, tools is not None)
            if self._picked is not None:
                break  # the facts' sentence (or the decline) is said already
            if call_text is None or tools is None:
                break
            called = await self._call_tools(tools, call_text, calls_left, clauses)
            if called is None:
                break  # a failure was said instead
            calls, answers = called
            calls_left -= len(answers)
            messages = [*messages, Message("assistant", as_template_text(calls)), *answers]
            stats = GenerationStats()  # the first round's stays the turn's (its prompt, its cache)
        for clause in splitter.flush():
            await self._put_checked(clause, clauses)
        if self._sentence:  # the reply ended inside a sentence
            await self._check_and_put(self._sentence, clauses)
        self._no_preamble()
        await clauses.put(None)

    def _site_answer(self, number: int) -> SiteAnswer:
        assert self.tools is not None
        answer = self.tools.site_answer(number, self.transcript)
        self.trace.chosen.append(number)
        self.trace.answer_check = answer.why
        if answer.why:
            log.info("turn %s: chose [%d]: %s", self.trace.turn_id, number, answer.why)
        return answer

    async def _say_site_answer(self, answer: SiteAnswer, clauses: Clauses) -> None:
        """Say the facts' sentence the model chose, as written, or the product's decline."""
        from engines.tts.clauses import ClauseSplitter

        self._declined = answer.declined
        self._reply_parts.append(answer.text)
        splitter = ClauseSplitter(first_clause_words=self.config.speech.first_clause_words)
        for clause in [*splitter.push(answer.text), *splitter.flush()]:
            await self.voice.put(clause, clauses)

    async def _reply_or_call(
        self,
        messages: list[Message],
        stats: GenerationStats,
        splitter: ClauseSplitter,
        clauses: Clauses,
        tools_offered: bool,
    ) -> str | None:
        """Stream one LLM reply into the clauses; when its first output is a tool call, hold it back
        (saying the preamble at once) and return its text instead."""
        engines = self.engines
        conversation = self.trace.session_id
        decided: bool | None = None if tools_offered else False
        naming, call_began = True, 0.0
        selecting: bool | None = None if self._selects else False  # None: cannot tell yet
        held: list[str] = []
        if self._llm_cancel.is_set():  # the round before ended (its stream sets it): a new one
            self._llm_cancel = threading.Event()
        cancel = self._llm_cancel
        judged = self._words_judged if self._on_words is not None and stats is self.stats else None
        try:
            pieces = engines.llm_worker.stream(
                lambda: engines.llm.stream(
                    messages, cancel=cancel, stats=stats, conversation=conversation, on_end_of_message=judged
                ),
                cancel=cancel,
                max_pending=1,  # the next token only once this piece is handled (a clause to Piper first)
            )
            async with contextlib.aclosing(pieces):
                async for piece in pieces:
                    self._tell_words(None)  # the verdict comes before the first token, or not at all
                    self.trace.mark("llm_first_token")
                    if decided is not False or selecting is not False:
                        held.append(piece)
                        text = "".join(held)
                        if selecting is None:
                            picked = selection_in(text)
                            if picked is None:
                                continue
                            if picked is not False:  # a few tokens decided the answer: stop the model
                                self._picked = int(picked)
                                cancel.set()
                                await self._say_site_answer(self._site_answer(self._picked), clauses)
                                break
                            selecting = False
                        if decided is None:
                            decided = starts_a_call(text)
                            call_began = time.monotonic()
                        if decided and naming:  # the preamble waits for the tool's name
                            name = called_name(text)
                            if name is not None:
                                naming = False
                                await self._preamble_for(name, call_began, clauses)
                        if decided is not False:
                            continue
                        piece, held = text, []
                    await self._speak_piece(piece, splitter, clauses)
                    if self._withheld:
                        break
        except Exception as err:
            raise TurnFailed(Stage.LLM, err) from err
        finally:
            if stats is not self.stats:
                self.trace.llm_tokens += stats.generated_tokens
        if decided and self._picked is None:
            if naming:  # no name could be read: the call may still take a while
                await self._preamble_later(clauses, since=call_began)
            return "".join(held)
        if held and self._picked is None:  # the reply ended before it could tell: it was text
            await self._speak_piece("".join(held), splitter, clauses)
        return None

    def _words_judged(self, probability: float) -> None:
        """From the LLM's thread: hand the words' verdict to the event loop."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._tell_words, probability)

    def _tell_words(self, probability: float | None) -> None:
        hook, self._on_words = self._on_words, None
        if hook is not None:
            if probability is not None:
                self.trace.words_complete_p = round(probability, 6)
            hook(probability)

    async def _speak_piece(self, piece: str, splitter: ClauseSplitter, clauses: Clauses) -> None:
        self._reply_parts.append(piece)
        for clause in splitter.push(piece):
            await self._put_checked(clause, clauses)

    async def _put_checked(self, clause: str, clauses: Clauses) -> None:
        """A clause of the model's reply, spoken only if its figures come from the sources; else the
        reply ends here with ``agent.not_known_reply`` (the model is stopped). Selecting, free text
        is checked a whole sentence at a time before any of it plays: no fragment before a decline."""
        if not self._selects:
            await self._check_and_put([clause], clauses)
            return
        self._sentence.append(clause)
        if clause.rstrip().rstrip("\"')").endswith((".", "!", "?")):
            await self._check_and_put(self._sentence, clauses)

    async def _check_and_put(self, pieces: list[str], clauses: Clauses) -> None:
        text, self._sentence = " ".join(piece.strip() for piece in pieces), []
        if self._withheld:
            return
        verdict = (
            self._sources.check(text, after=" ".join(self.voice.clauses))
            if self._sources is not None
            else None
        )
        if verdict is None or verdict.ok:
            for clause in pieces:
                await self.voice.put(clause, clauses)
            return
        assert verdict.why is not None
        self._withheld = True
        self._llm_cancel.set()
        self.trace.withheld.append(
            {"clause": text[:200], "why": verdict.why.value, "figures": verdict.ungrounded}
        )
        log.warning(
            "turn %s: a clause was not spoken (%s%s)",
            self.trace.turn_id,
            verdict.why.value,
            f": {', '.join(verdict.ungrounded)} in no source" if verdict.ungrounded else "",
        )
        ending = (
            self.tools.decline_sentence()
            if self.tools is not None
            else self.config.replies.fallback_reply  # its instructions read out: nothing was known
            if verdict.why is WithheldWhy.INTERNAL
            else (self.config.grounding or Grounding()).not_known_reply
        )
        await self.voice.put(ending, clauses)

    async def _preamble_for(self, name: str, call_began: float, clauses: Clauses) -> None:
        """The model is calling ``name``: a goodbye or a transfer says its own sentence and needs no
        "Let me check that." before it; any other tool gets the preamble (``_preamble_later``)."""
        if self.tools is not None and not self.tools.speaks_for_itself(name):
            await self._preamble_later(clauses, since=call_began)

    async def _preamble_later(self, clauses: Clauses, *, since: float) -> None:
        """A tool call began at ``since``: say the preamble if nothing else is said within
        ``agent.tool_preamble_after_ms`` of it (a quick tool and answer need none); at once when it
        is 0 (a task started then could lose the race to the tool's own sentence on a busy machine)."""
        if self.trace.preamble_audio or self.tools is None or self._preamble is not None:
            return  # once per turn
        delay_s = self.tools.agent.tool_preamble_after_ms / 1000.0 - (time.monotonic() - since)
        self._preamble_from = len(self.voice.clauses)
        if delay_s <= 0:
            await self._say_preamble(0.0, clauses)
            return
        self._preamble = asyncio.create_task(self._say_preamble(delay_s, clauses), name="tool-preamble")

    async def _say_preamble(self, delay_s: float, clauses: Clauses) -> None:
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        if self.tools is not None and not self.voice.clauses[self._preamble_from :]:
            self.trace.preamble_audio = True
            await self.voice.put(self.tools.agent.tool_preamble, clauses)

    def _no_preamble(self) -> None:
        if self._preamble is not None and not self._preamble.done():
            self._preamble.cancel()

    async def _call_tools(
        self, tools: ToolBox, call_text: str, calls_left: int, clauses: Clauses
    ) -> tuple[list[ToolCall], list[Message]] | None:
        """Run the calls in ``call_text``: the calls and the tools' answers as messages, or None after
        saying why not."""
        done = await run_tool_calls(tools, call_text, calls_left, self.transcript, self.trace)
        if done.transfer_to is not None:
            self.transfer_to = done.transfer_to
        if self._sources is not None:
            for text in done.sources:
                self._sources.add(text)
        if done.say is not None:
            await self._say_instead(done.say, clauses)
            return None
        return done.calls, done.answers

    async def _say_instead(self, sentence: str, clauses: Clauses) -> None:
        self._reply_parts.append(sentence)
        await self.voice.put(sentence, clauses)


def _says(reply: str, sentence: str) -> bool:
    """``reply`` says ``sentence`` (case, punctuation and spacing aside, as the WER compares words)."""
    words = normalize_text(sentence)
    return bool(words) and f" {words} " in f" {normalize_text(reply)} "


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
