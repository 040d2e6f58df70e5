"""microWakeWord: the 40 log-mel features of TensorFlow's micro frontend every 10 ms (pymicro-features),
three at a time through a streaming TensorFlow Lite model, its probabilities averaged over a window."""

from __future__ import annotations

import json
import logging
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

from engines.errors import ModelFileError
from engines.wake.tflite import Interpreter, Model, open_library

log = logging.getLogger(__name__)

_CHUNK_BYTES = 320  # 10 ms of 16-bit samples at 16 kHz
REFRACTORY_S = 1.5  # after a detection the phrase's own tail is not heard again


class MicroWakeStream:
    def __init__(self, engine: MicroWakeWord) -> None:
        from pymicro_features import MicroFrontend

        self.engine = engine
        self._frontend = MicroFrontend()
        self._interpreter = Interpreter(engine.model)
        self._rows: list[np.ndarray] = []
        self._probabilities: deque[float] = deque(maxlen=engine.window)
        self._pcm = b""
        self._quiet_steps = 0
        self._step_s = self._interpreter.input_rows * 0.01
        self.probability = 0.0

    def process(self, frame: np.ndarray) -> bool:
        samples = np.clip(np.asarray(frame, dtype=np.float32), -1.0, 1.0)
        data = self._pcm + (samples * 32767).astype("<i2").tobytes()
        at, heard = 0, False
        while at + _CHUNK_BYTES <= len(data):
            result = self._frontend.process_samples(data[at : at + _CHUNK_BYTES])
            if result.samples_read <= 0:
                break
            at += result.samples_read * 2
            if result.features:
                heard = self._feature(np.asarray(result.features, dtype=np.float32)) or heard
        self._pcm = data[at:]
        return heard

    def _feature(self, row: np.ndarray) -> bool:
        self._rows.append(row)
        if len(self._rows) < self._interpreter.input_rows:
            return False
        probability = float(self._interpreter.run(np.stack(self._rows)[np.newaxis]).max())
        self._rows.clear()
        if self._quiet_steps > 0:
            self._quiet_steps -= 1
            return False
        self._probabilities.append(probability)
        if len(self._probabilities) < self._probabilities.maxlen:  # type: ignore[operator]
            return False
        self.probability = float(np.mean(self._probabilities))
        if self.probability <= self.engine.threshold:
            return False
        self._probabilities.clear()
        self._quiet_steps = round(REFRACTORY_S / self._step_s)
        return True

    def close(self) -> None:
        self._interpreter.close()

    def __del__(self) -> None:
        self.close()


class MicroWakeWord:
    def __init__(self, library: Path, model: Path, config: Path, *, threshold: float | None) -> None:
        self.library_path, self.model_path, self.config_path = library, model, config
        settings = _read_config(config)
        self.phrase = str(settings.get("wake_word", model.stem))
        micro = settings.get("micro", {})
        self.threshold = float(threshold if threshold is not None else micro.get("probability_cutoff", 0.5))
        self.window = int(micro.get("sliding_window_size", 5))
        self.model: Any = None

    def load(self) -> None:
        lib = open_library(self.library_path)
        self.model = Model(lib, self.model_path)
        stream = self.stream()  # one run, so that a broken model fails here and not in a call
        stream.process(np.zeros(1600, dtype=np.float32))
        stream.close()
        log.info(
            "wake word %r loaded (threshold %.2f over %d steps)", self.phrase, self.threshold, self.window
        )

    def stream(self) -> MicroWakeStream:
        if self.model is None:
            raise RuntimeError("load() the wake word first")
        return MicroWakeStream(self)

    def close(self) -> None:
        if self.model is not None:
            self.model.close()
            self.model = None


def _read_config(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ModelFileError(
            f"the wake word settings {path} cannot be read: {err}",
            fix="rebuild the bundle (python -m build_scripts bundle --out DIR)",
        ) from err
    if not isinstance(data, dict):
        raise ModelFileError(f"the wake word settings {path} are not a JSON object", fix="rebuild the bundle")
    return data
