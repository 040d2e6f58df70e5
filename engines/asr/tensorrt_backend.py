"""TensorRT graph runner (TensorRT 10 Python API + pycuda), for plans built on the device.

Each run copies the named inputs to the GPU, sets their shapes, executes with ``execute_async_v3``
and copies every output back, so the decoding loop is the same as on ONNX Runtime. Device buffers
are kept per tensor and grown to the next power of two when a tensor gets larger, so a decoder whose
KV cache grows by one position a step reallocates a few times per utterance, not at every step.
Works with TensorRT 8.6 (JetPack 6.0) and 10.x (JetPack 6.1/6.2): both have the tensor-name API.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np

from engines.cancel import raise_if_cancelled
from engines.errors import BackendUnavailable, InputError, ModelFileError

log = logging.getLogger(__name__)

REBUILD_FIX = "build the plans on this device: python -m build_scripts.whisper.tensorrt --bundle DIR"


def _import_tensorrt() -> tuple[Any, Any]:
    try:
        import pycuda.driver as cuda
        import tensorrt as trt
    except ImportError as err:
        raise BackendUnavailable(
            f"ASR backend 'tensorrt' needs tensorrt and pycuda ({err})",
            fix='on a Jetson they come with JetPack (apt install python3-libnvinfer) and pip install -e ".[jetson]"; '
            'elsewhere set asr.backend = "onnxruntime"',
        ) from err
    return trt, cuda


def current_device(cuda: Any) -> dict[str, str]:
    device = cuda.Device(0)
    major, minor = device.compute_capability()
    return {"gpu": str(device.name()), "compute_capability": f"{major}.{minor}"}


class TensorRtGraphRunner:
    def __init__(self, path: Path, *, expected: dict[str, Any] | None = None) -> None:
        trt, cuda = _import_tensorrt()
        self._trt = trt
        self._cuda = cuda
        cuda.init()
        if cuda.Device.count() == 0:
            raise BackendUnavailable("no CUDA device found", fix='set asr.backend = "onnxruntime"')
        here = {"tensorrt": trt.__version__, **current_device(cuda)}
        for key, value in (expected or {}).items():
            if key in here and str(value) != here[key]:
                raise ModelFileError(
                    f"{path.name} was built for {key} {value}, this device has {here[key]}", fix=REBUILD_FIX
                )
        self._context = cuda.Device(0).retain_primary_context()
        self._context.push()
        try:
            runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
            self._engine = runtime.deserialize_cuda_engine(path.read_bytes())
            if self._engine is None:
                raise ModelFileError(f"TensorRT cannot deserialize {path}", fix=REBUILD_FIX)
            self._exec = self._engine.create_execution_context()
            self._stream = cuda.Stream()
        finally:
            self._context.pop()
        self.name = path.name
        names = [self._engine.get_tensor_name(i) for i in range(self._engine.num_io_tensors)]
        is_input = {n: self._engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT for n in names}
        self._inputs = [n for n in names if is_input[n]]
        self._outputs = [n for n in names if not is_input[n]]
        self._dtypes = {n: np.dtype(trt.nptype(self._engine.get_tensor_dtype(n))) for n in names}
        self._buffers: dict[str, tuple[Any, int]] = {}

    def input_dtype(self, name: str) -> np.dtype:
        return self._dtypes[name]

    def _device_buffer(self, name: str, nbytes: int) -> Any:
        held = self._buffers.get(name)
        if held is None or held[1] < nbytes:
            size = max(256, 1 << max(0, nbytes - 1).bit_length())
            self._buffers[name] = (self._cuda.mem_alloc(size), size)
        return self._buffers[name][0]

    def run(
        self, inputs: dict[str, np.ndarray], cancel: threading.Event | None = None
    ) -> dict[str, np.ndarray]:
        raise_if_cancelled(cancel)  # one GPU run is a few ms: checked before it, not during
        cuda = self._cuda
        self._context.push()
        try:
            for name in self._inputs:
                host = np.ascontiguousarray(inputs[name], dtype=self._dtypes[name])
                if not self._exec.set_input_shape(name, host.shape):
                    raise InputError(
                        f"{self.name}: input {name} of shape {host.shape} is outside the plan's "
                        "optimisation profile (audio or text longer than the plan was built for)",
                        fix=REBUILD_FIX,
                    )
                device = self._device_buffer(name, host.nbytes)
                if host.nbytes:
                    cuda.memcpy_htod_async(device, host, self._stream)
                self._exec.set_tensor_address(name, int(device))
            results: dict[str, np.ndarray] = {}
            for name in self._outputs:
                shape = tuple(self._exec.get_tensor_shape(name))
                results[name] = np.empty(shape, dtype=self._dtypes[name])
                self._exec.set_tensor_address(name, int(self._device_buffer(name, results[name].nbytes)))
            if not self._exec.execute_async_v3(self._stream.handle):
                raise RuntimeError(f"TensorRT execution of {self.name} failed")
            for name, host in results.items():
                if host.nbytes:
                    cuda.memcpy_dtoh_async(host, self._buffers[name][0], self._stream)
            self._stream.synchronize()
            return results
        finally:
            self._context.pop()

    def close(self) -> None:
        self._buffers.clear()
        self._exec = None
        self._engine = None
