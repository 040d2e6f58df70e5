"""The engines a session speaks with: each owned by its worker thread, shared by every session, and
loaded, moved to (appliance.daemon.bundle_switch) and closed as one set."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from appliance.pipeline.workers import EngineWorker
from appliance.tools import ToolBox
from engines.aec import EchoCanceller
from engines.asr import AsrEngine
from engines.cores import CoreShare
from engines.denoise import Denoiser
from engines.llm import LlmEngine
from engines.tts import TtsEngine
from engines.turn import TurnDetector
from engines.vad import VadEngine
from engines.wake import WakeWordEngine

log = logging.getLogger(__name__)


@dataclass
class TurnEngines:
    """The engines a turn uses, each with the worker thread that owns it."""

    asr: AsrEngine
    asr_worker: EngineWorker
    llm: LlmEngine
    llm_worker: EngineWorker
    tts: TtsEngine
    tts_worker: EngineWorker


@dataclass
class SessionEngines(TurnEngines):
    """The four engines, each owned by its worker thread; shared by every session."""

    vad: VadEngine
    vad_worker: EngineWorker
    turn: TurnDetector | None = None  # endpointer.mode = "smart_turn" only
    turn_worker: EngineWorker | None = None
    partial_asr: AsrEngine | None = None  # partials.partial_model, on the ASR worker; None: asr itself
    tools: ToolBox | None = None  # agent.tools, run off the event loop by the turn
    aec: EchoCanceller | None = None  # audio.echo_cancellation; each session that uses it has a stream
    aec_worker: EngineWorker | None = None
    denoise: Denoiser | None = None  # denoise.engine; each session has its streams
    denoise_worker: EngineWorker | None = None
    wake: WakeWordEngine | None = None  # wake.activation = wake_word; each session has its stream
    wake_worker: EngineWorker | None = None
    bundle_version: str = ""  # the bundle version the engines were loaded from ("": unversioned)
    cores: CoreShare | None = None  # the jobs of Whisper, Smart Turn and Piper, that the LLM lets finish

    @classmethod
    def create(
        cls,
        *,
        vad: VadEngine,
        asr: Any,
        llm: Any,
        tts: Any,
        turn: TurnDetector | None = None,
        partial_asr: AsrEngine | None = None,
        llm_threads: int = 1,
        tools: ToolBox | None = None,
        aec: EchoCanceller | None = None,
        denoise: Denoiser | None = None,
        wake: WakeWordEngine | None = None,
        bundle_version: str = "",
    ) -> SessionEngines:
        """``llm_threads``: sessions whose replies can reach the LLM at once (it batches them).

        Whisper, Smart Turn and Piper count their jobs in one CoreShare that the LLM lets finish
        before its steps (engines.cores, llm.yield_ms); the engines that run on every audio frame (VAD,
        echo, noise, wake word) take too little to count."""
        cores = CoreShare()
        engines = cls(
            asr=asr,
            asr_worker=EngineWorker("asr", cores=cores),
            llm=llm,
            llm_worker=EngineWorker("llm", threads=llm_threads),
            tts=tts,
            tts_worker=EngineWorker("tts", cores=cores),
            vad=vad,
            vad_worker=EngineWorker("vad"),
            turn=turn,
            turn_worker=None if turn is None else EngineWorker("turn", cores=cores),
            partial_asr=partial_asr,
            tools=tools,
            aec=aec,
            aec_worker=None if aec is None else EngineWorker("aec"),
            denoise=denoise,
            denoise_worker=None if denoise is None else EngineWorker("denoise"),
            wake=wake,
            wake_worker=None if wake is None else EngineWorker("wake"),
            bundle_version=bundle_version,
            cores=cores,
        )
        engines.use_llm(llm)
        return engines

    def use_llm(self, llm: Any) -> None:
        """Answer with ``llm`` (a benchmark's seeded one), fitting its steps around these engines' jobs."""
        self.llm = llm
        share = getattr(llm, "share_cores", None)
        if share is not None and self.cores is not None:
            share(self.cores)

    def pairs(self) -> dict[str, tuple[Any, EngineWorker]]:
        pairs: dict[str, tuple[Any, EngineWorker]] = {
            "vad": (self.vad, self.vad_worker),
            "asr": (self.asr, self.asr_worker),
            "llm": (self.llm, self.llm_worker),
            "tts": (self.tts, self.tts_worker),
        }
        if self.turn is not None and self.turn_worker is not None:
            pairs["turn"] = (self.turn, self.turn_worker)
        if self.partial_asr is not None:
            pairs["asr_partial"] = (self.partial_asr, self.asr_worker)
        if self.aec is not None and self.aec_worker is not None:
            pairs["aec"] = (self.aec, self.aec_worker)
        if self.denoise is not None and self.denoise_worker is not None:
            pairs["denoise"] = (self.denoise, self.denoise_worker)
        if self.wake is not None and self.wake_worker is not None:
            pairs["wake"] = (self.wake, self.wake_worker)
        return pairs

    async def load(self, *, one_at_a_time: bool = False) -> dict[str, float]:
        """Load (and warm up) every engine on its own thread, all at once, or one after the other
        (beside a set that serves calls: slower, and it leaves the calls more of the machine); seconds
        per engine."""

        async def load_one(engine: Any, worker: EngineWorker) -> float:
            started = time.monotonic()
            await worker.call(engine.load)
            return time.monotonic() - started

        pairs = self.pairs()
        if one_at_a_time:
            seconds = [await load_one(*pair) for pair in pairs.values()]
        else:
            seconds = await asyncio.gather(*(load_one(*pair) for pair in pairs.values()))
        if self.tools is not None:
            await asyncio.to_thread(self.tools.load)  # the facts files, read and indexed
        return dict(zip(pairs, seconds, strict=True))

    async def close(self, *, keep: Collection[object] = ()) -> None:
        """Close every engine and stop its worker, except the engines in ``keep`` (shared with the set
        that replaces this one: the echo canceller)."""
        for engine, worker in self.pairs().values():
            if any(engine is kept for kept in keep):
                continue
            try:
                await worker.call(engine.close)
            except Exception:
                log.exception("closing the %s engine failed", worker.name)
            worker.shutdown()
