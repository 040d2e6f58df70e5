"""Microphone and speaker through sounddevice (PortAudio).

Streams ask for exactly int16, mono, at the configured device rate (float32 made ALSA drop samples);
conversion to the appliance's 16 kHz float32 frames happens here. Blocking reads and writes run on
each stream's own thread so the event loop never waits on the device.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import soxr

from appliance.audio.base import (
    FRAME_SAMPLES,
    SAMPLE_RATE_HZ,
    Reframer,
    SourceBase,
    float32_to_int16,
    int16_to_float32,
)

log = logging.getLogger(__name__)

_FRAME_MS = 32


class AudioDeviceError(RuntimeError):
    """A microphone or speaker that cannot be opened; the message names the fix."""


def _sounddevice() -> Any:
    try:
        import sounddevice
    except OSError as err:  # the Python package is there but libportaudio is not
        raise AudioDeviceError(
            f"PortAudio is not installed ({err}) (fix: apt-get install libportaudio2)"
        ) from err
    except ImportError as err:
        raise AudioDeviceError("the sounddevice package is missing (fix: pip install sounddevice)") from err
    return sounddevice


def _device_arg(device: str | None) -> str | int | None:
    if device is None or device == "":
        return None
    return int(device) if device.isdigit() else device


@dataclass(frozen=True)
class DeviceProbe:
    available: bool
    name: str | None
    reason: str


def probe_device(kind: str, device: str | None = None) -> DeviceProbe:
    """Whether an input (``kind="input"``) or output device exists, without opening it."""
    try:
        sd = _sounddevice()
        info = sd.query_devices(_device_arg(device), kind=kind)
    except AudioDeviceError as err:
        return DeviceProbe(False, None, str(err))
    except Exception as err:  # sounddevice raises ValueError or PortAudioError when there is none
        wanted = f"device {device!r}" if device else f"default {kind} device"
        return DeviceProbe(False, None, f"no {wanted}: {err}")
    name = str(info.get("name", device))
    if int(info.get(f"max_{kind}_channels", 0)) < 1:
        return DeviceProbe(False, name, f"{name!r} has no {kind} channels")
    return DeviceProbe(True, name, "ok")


class MicrophoneSource(SourceBase):
    """Frames from a sounddevice input stream.

    The reader thread blocks while ``queue_frames`` frames are waiting, so a slow consumer loses audio
    at the device (an overflow, logged) rather than in an unbounded queue.
    """

    def __init__(
        self,
        device: str | None = None,
        *,
        device_sample_rate_hz: int = SAMPLE_RATE_HZ,
        queue_frames: int = 64,
        put_timeout_s: float = 0.5,
    ) -> None:
        self.device = device
        self.device_sample_rate_hz = device_sample_rate_hz
        self.name = f"microphone:{device or 'default'}"
        self.realtime = True
        self.overflows = 0
        self.dropped_frames = 0
        self._queue_frames = queue_frames
        self._put_timeout_s = put_timeout_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    async def frames(self) -> AsyncIterator[np.ndarray]:
        sd = _sounddevice()
        block = self.device_sample_rate_hz * _FRAME_MS // 1000
        try:
            stream = sd.RawInputStream(
                samplerate=self.device_sample_rate_hz,
                channels=1,
                dtype="int16",
                blocksize=block,
                device=_device_arg(self.device),
            )
            stream.start()
        except Exception as err:  # PortAudioError and ValueError both mean: cannot open
            raise AudioDeviceError(
                f"cannot open microphone {self.device or '(default)'} at {self.device_sample_rate_hz} Hz "
                f"int16 mono: {err} (fix: set audio.input_device / audio.device_sample_rate_hz, "
                "or audio.input = 'none')"
            ) from err
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[np.ndarray | None] = asyncio.Queue()
        room = threading.Semaphore(self._queue_frames)
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._read_loop, args=(stream, block, loop, queue, room), name="mic-reader", daemon=True
        )
        self._thread.start()
        try:
            while True:
                frame = await queue.get()
                room.release()
                if frame is None:
                    return
                yield frame
        finally:
            self._stop.set()
            await loop.run_in_executor(None, self._thread.join, 2.0)
            stream.close()

    def _read_loop(
        self,
        stream: Any,
        block: int,
        loop: asyncio.AbstractEventLoop,
        queue: asyncio.Queue[np.ndarray | None],
        room: threading.Semaphore,
    ) -> None:
        resampler = (
            None
            if self.device_sample_rate_hz == SAMPLE_RATE_HZ
            else soxr.ResampleStream(self.device_sample_rate_hz, SAMPLE_RATE_HZ, 1, dtype="float32")
        )
        reframer = Reframer(FRAME_SAMPLES)
        try:
            while not self._stop.is_set():
                data, overflowed = stream.read(block)
                if overflowed:
                    self.overflows += 1
                    log.warning("microphone overflow: audio was lost at the device")
                audio = int16_to_float32(np.frombuffer(data, dtype=np.int16))
                if resampler is not None:
                    audio = resampler.resample_chunk(audio)
                for frame in reframer.push(audio):
                    if not room.acquire(timeout=self._put_timeout_s):
                        self.dropped_frames += 1
                        continue
                    loop.call_soon_threadsafe(queue.put_nowait, frame)
        except Exception:
            log.exception("microphone read failed")
        finally:
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                loop.call_soon_threadsafe(queue.put_nowait, None)

    async def close(self) -> None:
        self._stop.set()


class SpeakerSink:
    """Audio to a sounddevice output stream (blocking writes on the sink's own thread)."""

    realtime = True

    def __init__(self, device: str | None = None, *, device_sample_rate_hz: int = SAMPLE_RATE_HZ) -> None:
        self.device = device
        self.sample_rate_hz = device_sample_rate_hz
        self.name = f"speaker:{device or 'default'}"
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="speaker")
        self._stream: Any = None

    def open(self) -> None:
        sd = _sounddevice()
        try:
            self._stream = sd.RawOutputStream(
                samplerate=self.sample_rate_hz,
                channels=1,
                dtype="int16",
                blocksize=self.sample_rate_hz * _FRAME_MS // 1000,
                device=_device_arg(self.device),
            )
            self._stream.start()
        except Exception as err:
            raise AudioDeviceError(
                f"cannot open speaker {self.device or '(default)'} at {self.sample_rate_hz} Hz int16 mono: "
                f"{err} (fix: set audio.output_device / audio.device_sample_rate_hz, or audio.output = 'none')"
            ) from err

    async def write(self, audio: np.ndarray) -> None:
        if self._stream is None:
            self.open()
        pcm = float32_to_int16(audio).tobytes()
        await asyncio.get_running_loop().run_in_executor(self._executor, self._stream.write, pcm)

    async def flush(self) -> None:
        if self._stream is None:
            return

        def restart() -> None:
            self._stream.abort()  # discards what the device has not played yet
            self._stream.start()

        await asyncio.get_running_loop().run_in_executor(self._executor, restart)

    async def close(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            await asyncio.get_running_loop().run_in_executor(self._executor, stream.close)
        self._executor.shutdown(wait=False)
