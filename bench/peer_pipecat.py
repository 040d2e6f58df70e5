"""pipecat 1.14 on the same engines, timed from the end of speech to its first audio. Runs in pipecat's
own environment (made by ``python -m bench peer``), never in the product's: it imports pipecat, numpy
and soundfile only.

    <peer venv>/bin/python bench/peer_pipecat.py --whisper DIR --voice FILE.onnx --llm-url URL ...

Reads one JSON request per line on stdin, ``{"file": ..., "speech_end_s": ...}``, says the recording
into a running pipecat pipeline at microphone pace (20 ms frames, silence before and after), and writes
one JSON line per turn: ``latency_ms`` (the end of speech, as the product's Silero VAD places it in the
file, to the first TTS audio frame), the transcript and the reply. The pipeline is pipecat's defaults:
Silero VAD and Smart Turn v3 (its bundled ONNX) in the user aggregator, Whisper through faster-whisper
(the bundle's CTranslate2 export, int8), the OpenAI service against llama_cpp.server, Piper.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

RATE_HZ = 16000
FRAME_S = 0.02
LEAD_S = 0.5
REPLY_QUIET_S = 1.5  # no TTS audio this long after the LLM's last token: the reply is over
TURN_TIMEOUT_S = 60.0


def build(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    from pipecat.audio.vad.silero import SileroVADAnalyzer
    from pipecat.frames.frames import (
        LLMFullResponseEndFrame,
        TranscriptionFrame,
        TTSAudioRawFrame,
        TTSTextFrame,
    )
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.task import PipelineParams, PipelineTask
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.processors.aggregators.llm_response_universal import (
        LLMContextAggregatorPair,
        LLMUserAggregatorParams,
    )
    from pipecat.processors.frame_processor import FrameProcessor
    from pipecat.services.openai.llm import OpenAILLMService
    from pipecat.services.piper.tts import PiperTTSService
    from pipecat.services.whisper.stt import WhisperSTTService

    class Watch(FrameProcessor):
        """Notes what passes: transcripts before the aggregator, audio and text after the TTS."""

        def __init__(self, turn: Turn) -> None:
            super().__init__()
            self.turn = turn

        async def process_frame(self, frame: Any, direction: Any) -> None:
            await super().process_frame(frame, direction)
            self.turn.saw(frame, TranscriptionFrame, TTSAudioRawFrame, TTSTextFrame, LLMFullResponseEndFrame)
            await self.push_frame(frame, direction)

    turn = Turn()
    stt = WhisperSTTService(
        settings=WhisperSTTService.Settings(model=args.whisper), device="cpu", compute_type="int8"
    )
    voice = Path(args.voice)
    tts = PiperTTSService(settings=PiperTTSService.Settings(voice=voice.stem), download_dir=voice.parent)
    llm = OpenAILLMService(
        api_key="local",
        base_url=args.llm_url,
        settings=OpenAILLMService.Settings(
            model="local", temperature=args.temperature, max_tokens=args.max_tokens, seed=args.seed
        ),
    )
    context = LLMContext([{"role": "system", "content": args.system_prompt}])
    aggregators = LLMContextAggregatorPair(
        context, user_params=LLMUserAggregatorParams(vad_analyzer=SileroVADAnalyzer())
    )
    pipeline = Pipeline(
        [stt, Watch(turn), aggregators.user(), llm, tts, Watch(turn), aggregators.assistant()]
    )
    task = PipelineTask(
        pipeline,
        params=PipelineParams(audio_in_sample_rate=RATE_HZ, audio_out_sample_rate=args.out_rate_hz),
        idle_timeout_secs=None,
        enable_rtvi=False,
    )
    return task, turn, context


class Turn:
    """One question's clock and what came back."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.first_audio: float | None = None
        self.last_audio = 0.0
        self.reply_ended = False
        self.transcript: list[str] = []
        self.reply: list[str] = []

    def saw(
        self, frame: Any, transcription: type[Any], audio: type[Any], text: type[Any], end: type[Any]
    ) -> None:
        now = time.monotonic()
        if isinstance(frame, transcription):
            self.transcript.append(frame.text)
        elif isinstance(frame, audio):
            self.first_audio = self.first_audio or now
            self.last_audio = now
        elif isinstance(frame, text):
            self.reply.append(frame.text)
        elif isinstance(frame, end):
            self.reply_ended = True

    def over(self, now: float) -> bool:
        return self.reply_ended and self.first_audio is not None and now - self.last_audio > REPLY_QUIET_S


async def say(
    task: Any, turn: Turn, context: Any, system_prompt: str, request: dict[str, Any]
) -> dict[str, Any]:
    """Feeds one recording at microphone pace and keeps feeding silence until the reply is over."""
    from pipecat.frames.frames import InputAudioRawFrame

    audio, rate = sf.read(request["file"], dtype="int16", always_2d=True)
    if rate != RATE_HZ:
        raise SystemExit(f"error: {request['file']} is {rate} Hz; the peer bench feeds 16 kHz recordings")
    speech = audio[:, 0]
    samples = round(FRAME_S * RATE_HZ)
    lead = np.zeros(round(LEAD_S * RATE_HZ), dtype=np.int16)
    stream = np.concatenate([lead, speech])
    context.set_messages([{"role": "system", "content": system_prompt}])  # every question a new conversation
    turn.reset()
    start = time.monotonic()
    speech_end = start + LEAD_S + float(request["speech_end_s"])
    offset = 0
    tick = start
    while True:
        now = time.monotonic()
        if turn.over(now) or now - speech_end > TURN_TIMEOUT_S:
            break
        chunk = stream[offset : offset + samples]
        offset += samples
        if len(chunk) < samples:
            chunk = np.concatenate([chunk, np.zeros(samples - len(chunk), dtype=np.int16)])
        await task.queue_frame(InputAudioRawFrame(audio=chunk.tobytes(), sample_rate=RATE_HZ, num_channels=1))
        tick += FRAME_S
        await asyncio.sleep(max(0.0, tick - time.monotonic()))
    latency = None if turn.first_audio is None else 1000 * (turn.first_audio - speech_end)
    return {
        "file": request["file"],
        "latency_ms": None if latency is None else round(latency, 1),
        "transcript": " ".join(turn.transcript).strip(),
        "reply": "".join(turn.reply).strip(),
        "error": None if latency is not None else "no reply audio",
    }


async def serve(args: argparse.Namespace) -> None:
    from pipecat.frames.frames import EndFrame
    from pipecat.pipeline.runner import PipelineRunner

    task, turn, context = build(args)
    runner = PipelineRunner(handle_sigint=False)
    running = asyncio.create_task(runner.run(task))
    loop = asyncio.get_running_loop()
    print(json.dumps({"ready": True}), flush=True)
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line.strip():
            break
        row = await say(task, turn, context, args.system_prompt, json.loads(line))
        print(json.dumps(row), flush=True)
    await task.queue_frame(EndFrame())
    await asyncio.wait_for(running, timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--whisper", required=True, help="a CTranslate2 Whisper folder")
    parser.add_argument("--voice", required=True, help="a Piper voice .onnx (its .onnx.json beside it)")
    parser.add_argument("--out-rate-hz", type=int, default=22050)
    parser.add_argument("--llm-url", required=True, help="an OpenAI-compatible server's /v1 address")
    parser.add_argument("--system-prompt", required=True)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--seed", type=int, default=0)
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
