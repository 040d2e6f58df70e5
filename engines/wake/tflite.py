"""The TensorFlow Lite C API, as much of it as a streaming wake word model needs (ctypes)."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Any

import numpy as np

from engines import native
from engines.errors import ModelFileError

_P = ctypes.c_void_p
# TfLiteType: the quantized types a microWakeWord model uses.
_NUMPY_TYPES = {3: np.uint8, 9: np.int8}


class _Quantization(ctypes.Structure):
    _fields_ = [("scale", ctypes.c_float), ("zero_point", ctypes.c_int32)]


_SIGNATURES: dict[str, tuple[list[Any], Any]] = {
    "TfLiteModelCreateFromFile": ([ctypes.c_char_p], _P),
    "TfLiteModelDelete": ([_P], None),
    "TfLiteInterpreterCreate": ([_P, _P], _P),
    "TfLiteInterpreterDelete": ([_P], None),
    "TfLiteInterpreterAllocateTensors": ([_P], ctypes.c_int),
    "TfLiteInterpreterInvoke": ([_P], ctypes.c_int),
    "TfLiteInterpreterGetInputTensor": ([_P, ctypes.c_int32], _P),
    "TfLiteInterpreterGetOutputTensor": ([_P, ctypes.c_int32], _P),
    "TfLiteTensorDim": ([_P, ctypes.c_int32], ctypes.c_int32),
    "TfLiteTensorType": ([_P], ctypes.c_int32),
    "TfLiteTensorByteSize": ([_P], ctypes.c_size_t),
    "TfLiteTensorQuantizationParams": ([_P], _Quantization),
    "TfLiteTensorCopyFromBuffer": ([_P, _P, ctypes.c_size_t], ctypes.c_int),
    "TfLiteTensorCopyToBuffer": ([_P, _P, ctypes.c_size_t], ctypes.c_int),
}


def open_library(path: Path) -> ctypes.CDLL:
    lib = native.open_library(
        path,
        "TensorFlow Lite",
        load_fix="its wheel needs glibc 2.35 (JetPack 6, Ubuntu 22.04 or later)",
        turn_off="wake.activation = 'always'",
        mode=getattr(os, "RTLD_GLOBAL", 0),
    )
    for name, (argtypes, restype) in _SIGNATURES.items():
        function = getattr(lib, name)
        function.argtypes, function.restype = argtypes, restype
    return lib


class Model:
    """A model file, loaded once; each ``Interpreter`` over it keeps its own streaming state."""

    def __init__(self, lib: ctypes.CDLL, path: Path) -> None:
        self.lib = lib
        self.path = path
        self.handle = lib.TfLiteModelCreateFromFile(str(path).encode())
        if not self.handle:
            raise ModelFileError(
                f"TensorFlow Lite could not read the wake word model {path}",
                fix=native.REBUILD,
            )

    def close(self) -> None:
        if self.handle:
            self.lib.TfLiteModelDelete(self.handle)
            self.handle = None


class Interpreter:
    """One quantized input, one quantized output; ``run`` takes and gives floats."""

    def __init__(self, model: Model) -> None:
        lib = self.lib = model.lib
        self.handle = lib.TfLiteInterpreterCreate(model.handle, None)
        if not self.handle or lib.TfLiteInterpreterAllocateTensors(self.handle) != 0:
            raise ModelFileError(
                f"TensorFlow Lite could not prepare the wake word model {model.path}",
                fix=native.REBUILD,
            )
        self._input = lib.TfLiteInterpreterGetInputTensor(self.handle, 0)
        self._output = lib.TfLiteInterpreterGetOutputTensor(self.handle, 0)
        self.input_rows = int(lib.TfLiteTensorDim(self._input, 1))
        q_in, q_out = (lib.TfLiteTensorQuantizationParams(t) for t in (self._input, self._output))
        self._in_scale, self._in_zero = float(q_in.scale), int(q_in.zero_point)
        self._out_scale, self._out_zero = float(q_out.scale), int(q_out.zero_point)
        types = (int(lib.TfLiteTensorType(self._input)), int(lib.TfLiteTensorType(self._output)))
        if not all(t in _NUMPY_TYPES for t in types):
            raise ModelFileError(
                f"the wake word model {model.path} is not quantized to 8 bits (tensor types {types})",
                fix="use a microWakeWord model of the bundle",
            )
        self._in_type, self._out_type = (_NUMPY_TYPES[t] for t in types)
        self._out_size = int(lib.TfLiteTensorByteSize(self._output))

    def run(self, features: np.ndarray) -> np.ndarray:
        info = np.iinfo(self._in_type)
        quantized = np.clip(np.round(features / self._in_scale + self._in_zero), info.min, info.max)
        data = np.ascontiguousarray(quantized, dtype=self._in_type)
        self.lib.TfLiteTensorCopyFromBuffer(self._input, data.ctypes.data_as(_P), data.nbytes)
        self.lib.TfLiteInterpreterInvoke(self.handle)
        out = np.empty(self._out_size // np.dtype(self._out_type).itemsize, dtype=self._out_type)
        self.lib.TfLiteTensorCopyToBuffer(self._output, out.ctypes.data_as(_P), self._out_size)
        return (out.astype(np.float32) - self._out_zero) * self._out_scale

    def close(self) -> None:
        if self.handle:
            self.lib.TfLiteInterpreterDelete(self.handle)
            self.handle = None
