"""How a backend executes one graph: named numpy arrays in, named numpy arrays out.

The decoding loop only sees this interface, so the ONNX Runtime and TensorRT backends share the
front end, tokenizer and decoding logic, and CPU tests cover what the Jetson runs.
"""

from __future__ import annotations

import threading
from typing import Protocol

import numpy as np

BACKENDS = ("onnxruntime", "tensorrt")
DEVICES = ("cpu", "cuda")


class GraphRunner(Protocol):
    name: str

    def input_dtype(self, name: str) -> np.dtype:
        """The element type the graph expects for input ``name`` (float16 graphs take float16)."""
        ...

    def run(
        self, inputs: dict[str, np.ndarray], cancel: threading.Event | None = None
    ) -> dict[str, np.ndarray]:
        """Execute the graph; returns every output by name, as host arrays. Raises
        ``engines.cancel.Cancelled`` if ``cancel`` is set before (or, where the runtime can stop a
        run, during) the run."""
        ...

    def close(self) -> None: ...
