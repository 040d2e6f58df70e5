"""The two suppressors' native libraries (loaded with ctypes from the bundle) and the stream that
runs one of them at 48 kHz for 16 kHz frames."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from engines.errors import BackendUnavailable, ModelFileError
from engines.native import REBUILD, open_library

log = logging.getLogger(__name__)

SAMPLE_RATE_HZ = 16000
NATIVE_RATE_HZ = 48000
_FLOATS = ctypes.POINTER(ctypes.c_float)
# RNNoise works on 16-bit sample values held in floats.
_RNNOISE_SCALE = 32768.0


class Library(Protocol):
    name: str
    frame_samples: int  # at 48 kHz
    delay_s: float  # the model's own look-ahead and window: output sample n is input sample n - delay

    def load(self) -> None: ...

    def create(self) -> Any: ...

    def process(self, state: Any, frame: np.ndarray) -> np.ndarray: ...

    def free(self, state: Any) -> None: ...


def _open(path: Path, what: str) -> ctypes.CDLL:
    return open_library(
        path,
        what,
        load_fix="rebuild the bundle on this machine (its wheel is per platform)",
        turn_off="denoise.engine = 'none'",
    )


class RnnoiseLibrary:
    name = "rnnoise"
    delay_s = 0.02

    def __init__(self, path: Path) -> None:
        self.path = path
        self.frame_samples = 480
        self._lib: Any = None

    def load(self) -> None:
        lib = _open(self.path, "RNNoise")
        lib.rnnoise_create.restype = ctypes.c_void_p
        lib.rnnoise_create.argtypes = [ctypes.c_void_p]
        lib.rnnoise_destroy.argtypes = [ctypes.c_void_p]
        lib.rnnoise_get_frame_size.restype = ctypes.c_int
        lib.rnnoise_process_frame.argtypes = [ctypes.c_void_p, _FLOATS, _FLOATS]
        lib.rnnoise_process_frame.restype = ctypes.c_float
        self.frame_samples = int(lib.rnnoise_get_frame_size())
        self._lib = lib

    def create(self) -> Any:
        state = self._lib.rnnoise_create(None)
        if not state:
            raise BackendUnavailable("RNNoise could not create a stream", fix="check the memory left")
        return state

    def process(self, state: Any, frame: np.ndarray) -> np.ndarray:
        data = np.ascontiguousarray(frame * _RNNOISE_SCALE, dtype=np.float32)
        out = np.empty_like(data)
        self._lib.rnnoise_process_frame(state, out.ctypes.data_as(_FLOATS), data.ctypes.data_as(_FLOATS))
        return out / _RNNOISE_SCALE

    def free(self, state: Any) -> None:
        self._lib.rnnoise_destroy(state)


class DeepFilterLibrary:
    name = "deepfilternet"
    delay_s = 0.03

    def __init__(self, path: Path, model: Path, *, max_attenuation_db: float) -> None:
        self.path = path
        self.model = model
        self.max_attenuation_db = max_attenuation_db
        self.frame_samples = 480
        self._lib: Any = None

    def load(self) -> None:
        if not self.model.is_file():
            raise ModelFileError(
                f"the DeepFilterNet3 model {self.model} is missing",
                fix=f"{REBUILD}, or set denoise.engine = 'none'",
            )
        lib = _open(self.path, "DeepFilterNet")
        lib.df_create.restype = ctypes.c_void_p
        lib.df_create.argtypes = [ctypes.c_char_p, ctypes.c_float, ctypes.c_char_p]
        lib.df_get_frame_length.restype = ctypes.c_size_t
        lib.df_get_frame_length.argtypes = [ctypes.c_void_p]
        lib.df_process_frame.restype = ctypes.c_float
        lib.df_process_frame.argtypes = [ctypes.c_void_p, _FLOATS, _FLOATS]
        lib.df_free.argtypes = [ctypes.c_void_p]
        self._lib = lib
        state = self.create()
        self.frame_samples = int(lib.df_get_frame_length(state))
        self.free(state)

    def create(self) -> Any:
        state = self._lib.df_create(str(self.model).encode(), float(self.max_attenuation_db), None)
        if not state:
            raise ModelFileError(
                f"DeepFilterNet could not read its model {self.model}",
                fix=f"{REBUILD}, or set denoise.engine = 'none'",
            )
        return state

    def process(self, state: Any, frame: np.ndarray) -> np.ndarray:
        data = np.ascontiguousarray(frame, dtype=np.float32)
        out = np.empty_like(data)
        self._lib.df_process_frame(state, data.ctypes.data_as(_FLOATS), out.ctypes.data_as(_FLOATS))
        return out

    def free(self, state: Any) -> None:
        self._lib.df_free(state)


# A 3x polyphase resampler of our own rather than soxr's: soxr HQ's round trip 16 -> 48 -> 16 kHz
# takes 52 ms (LQ 25 ms), which would delay every end of turn; this filter's takes 2 ms.
_TAPS = 97
_LOWPASS = (np.sinc(np.arange(-(_TAPS // 2), _TAPS // 2 + 1) / 3.0) / 3.0 * np.kaiser(_TAPS, 8.0)).astype(
    np.float32
)
_FILTER_DELAY_S = (_TAPS // 2) * 2 / NATIVE_RATE_HZ  # once up, once down


class _Fir:
    """``_LOWPASS`` over a stream, chunk by chunk."""

    def __init__(self) -> None:
        self._tail = np.zeros(_TAPS - 1, dtype=np.float32)

    def __call__(self, chunk: np.ndarray) -> np.ndarray:
        data = np.concatenate([self._tail, chunk])
        self._tail = data[len(data) - (_TAPS - 1) :]
        return np.convolve(data, _LOWPASS, mode="valid").astype(np.float32)


class _Up3:
    def __init__(self) -> None:
        self._fir = _Fir()

    def __call__(self, chunk: np.ndarray) -> np.ndarray:
        spread = np.zeros(len(chunk) * 3, dtype=np.float32)
        spread[::3] = chunk * 3.0
        return self._fir(spread)


class _Down3:
    def __init__(self) -> None:
        self._fir = _Fir()
        self._phase = 0  # samples to skip at the start of the next chunk

    def __call__(self, chunk: np.ndarray) -> np.ndarray:
        filtered = self._fir(chunk)
        out = filtered[self._phase :: 3]
        self._phase = (self._phase - len(filtered)) % 3
        return out


class NativeStream:
    """16 kHz frames up to 48 kHz, through the library in its frames, and back; as many samples out
    as in, ``latency_s`` late (settled when the stream is made, so that it never changes)."""

    def __init__(self, library: Library) -> None:
        self.library = library
        self._state = library.create()
        self._lock = threading.Lock()
        self._up = _Up3()
        self._down = _Down3()
        self._pending = np.zeros(0, dtype=np.float32)  # 48 kHz, less than one library frame
        self._ready = np.zeros(0, dtype=np.float32)  # 16 kHz, cleaned, not yet returned
        self._buffered = 0  # samples of silence put in front of the output so that it keeps pace
        for _ in range(5):  # 5 x 512 samples are 16 whole library frames: every shortfall taken up front
            self.process(np.zeros(512, dtype=np.float32))
        self.latency_s = self._buffered / SAMPLE_RATE_HZ + _FILTER_DELAY_S + library.delay_s

    def process(self, frame: np.ndarray) -> np.ndarray:
        data = np.ascontiguousarray(frame, dtype=np.float32)
        with self._lock:
            up = self._up(data)
            pending = np.concatenate([self._pending, up])
            size = self.library.frame_samples
            whole = len(pending) // size * size
            cleaned = [
                self.library.process(self._state, pending[i : i + size]) for i in range(0, whole, size)
            ]
            self._pending = pending[whole:]
            down = self._down(np.concatenate(cleaned)) if cleaned else np.zeros(0, np.float32)
            ready = np.concatenate([self._ready, down.astype(np.float32)])
            short = len(data) - len(ready)
            if short > 0:
                self._buffered += short
                ready = np.concatenate([np.zeros(short, dtype=np.float32), ready])
            out, self._ready = ready[: len(data)], ready[len(data) :]
            return out

    def close(self) -> None:
        with self._lock:
            if self._state is not None:
                self.library.free(self._state)
                self._state = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter shutdown
            self.close()


class NativeDenoiser:
    """One loaded library; a stream per session."""

    def __init__(self, library: Library) -> None:
        self.library = library
        self.name = library.name

    def load(self) -> None:
        self.library.load()
        stream = self.stream()  # one run, so that a broken library fails here and not in a call
        stream.process(np.zeros(512, dtype=np.float32))
        stream.close()
        log.info(
            "%s noise suppression loaded (%d-sample frames at 48 kHz)", self.name, self.library.frame_samples
        )

    def stream(self) -> NativeStream:
        return NativeStream(self.library)

    def close(self) -> None:
        pass
