"""The TensorRT runner's and plan builder's own logic against a small fake of the TensorRT and pycuda
APIs (TensorRT itself cannot be installed off an NVIDIA machine; hw_tests/ runs the real one): shapes
outside the plan's profile are refused with the fix, device buffers are not reallocated at every
decoder step, and the builder uses the flags of the TensorRT version in use."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from build_scripts.whisper.tensorrt import fp16_flag, network_flags
from engines.asr import tensorrt_backend
from engines.asr.tensorrt_backend import TensorRtGraphRunner
from engines.errors import BackendUnavailable, InputError

MAX_POSITIONS = 1024  # the fake plan's optimisation profile: up to 1024 positions


class _Memory:
    def __init__(self) -> None:
        self.blocks: dict[int, bytearray] = {}
        self.allocations = 0

    def mem_alloc(self, size: int) -> int:
        self.allocations += 1
        address = 0x1000 * (len(self.blocks) + 1)
        self.blocks[address] = bytearray(size)
        return address


class _Context:
    """The fake plan: output ``y`` = input ``x`` * 2, for shapes up to MAX_POSITIONS along axis 1."""

    def __init__(self, memory: _Memory) -> None:
        self.memory = memory
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.addresses: dict[str, int] = {}

    def set_input_shape(self, name: str, shape: tuple[int, ...]) -> bool:
        if len(shape) != 2 or shape[1] > MAX_POSITIONS:
            return False
        self.shapes[name] = tuple(shape)
        return True

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        return self.shapes["x"]

    def set_tensor_address(self, name: str, address: int) -> None:
        self.addresses[name] = address

    def execute_async_v3(self, stream: int) -> bool:
        count = int(np.prod(self.shapes["x"]))
        source = np.frombuffer(self.memory.blocks[self.addresses["x"]], dtype=np.float32, count=count)
        target = np.frombuffer(self.memory.blocks[self.addresses["y"]], dtype=np.float32, count=count)
        target[:] = source * 2
        return True


def _fakes(memory: _Memory) -> tuple[Any, Any]:
    context = _Context(memory)
    engine = SimpleNamespace(
        num_io_tensors=2,
        get_tensor_name=lambda i: ("x", "y")[i],
        get_tensor_mode=lambda name: "in" if name == "x" else "out",
        get_tensor_dtype=lambda name: np.float32,
        create_execution_context=lambda: context,
    )
    trt = SimpleNamespace(
        __version__="10.3.0",
        Runtime=lambda logger: SimpleNamespace(deserialize_cuda_engine=lambda data: engine),
        TensorIOMode=SimpleNamespace(INPUT="in"),
        nptype=lambda dtype: dtype,
    )
    trt.Logger = type("Logger", (), {"WARNING": 2, "__init__": lambda self, level: None})

    def htod(address: int, host: np.ndarray, stream: Any) -> None:
        memory.blocks[address][: host.nbytes] = host.tobytes()

    def dtoh(host: np.ndarray, address: int, stream: Any) -> None:
        host.reshape(-1).view(np.uint8)[:] = memory.blocks[address][: host.nbytes]

    device = SimpleNamespace(
        name=lambda: "Fake GPU",
        compute_capability=lambda: (8, 7),
        retain_primary_context=lambda: SimpleNamespace(push=lambda: None, pop=lambda: None),
    )
    cuda = SimpleNamespace(
        init=lambda: None,
        Device=type("Device", (), {"count": staticmethod(lambda: 1), "__new__": lambda cls, i: device}),
        Stream=lambda: SimpleNamespace(handle=1, synchronize=lambda: None),
        mem_alloc=memory.mem_alloc,
        memcpy_htod_async=htod,
        memcpy_dtoh_async=dtoh,
    )
    return trt, cuda


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[TensorRtGraphRunner, _Memory]:
    memory = _Memory()
    fakes = _fakes(memory)
    monkeypatch.setattr(tensorrt_backend, "_import_tensorrt", lambda: fakes)
    plan = tmp_path / "decoder-fp16.plan"
    plan.write_bytes(b"plan")
    return TensorRtGraphRunner(plan), memory


def test_a_run_copies_in_executes_and_copies_out(runner: tuple[TensorRtGraphRunner, _Memory]) -> None:
    trt_runner, _ = runner
    x = np.arange(6, dtype=np.float32).reshape(1, 6)
    assert np.array_equal(trt_runner.run({"x": x})["y"], x * 2)


def test_a_growing_input_reallocates_its_buffer_a_few_times_not_at_every_step(
    runner: tuple[TensorRtGraphRunner, _Memory],
) -> None:
    trt_runner, memory = runner
    for positions in range(1, MAX_POSITIONS + 1):  # a decoder's cache growing by one a step
        x = np.full((1, positions), float(positions), dtype=np.float32)
        assert np.array_equal(trt_runner.run({"x": x})["y"], x * 2)
    # Two tensors, each grown by doubling from 256 bytes to 4 KiB: five allocations each, not ~1000.
    assert memory.allocations <= 2 * 5


def test_a_shape_outside_the_plans_profile_is_refused_with_the_fix(
    runner: tuple[TensorRtGraphRunner, _Memory],
) -> None:
    trt_runner, _ = runner
    with pytest.raises(InputError, match=r"input x of shape \(1, 1025\) is outside the plan's optimisation"):
        trt_runner.run({"x": np.zeros((1, MAX_POSITIONS + 1), dtype=np.float32)})


def test_the_builder_uses_the_flags_of_the_tensorrt_in_use() -> None:
    explicit = SimpleNamespace(EXPLICIT_BATCH=0)
    assert network_flags(SimpleNamespace(__version__="8.6.2", NetworkDefinitionCreationFlag=explicit)) == 1
    assert network_flags(SimpleNamespace(__version__="10.3.0")) == 0  # explicit batch is the only mode
    ten = SimpleNamespace(__version__="10.3.0", BuilderFlag=SimpleNamespace(FP16="fp16"))
    assert fp16_flag(ten) == "fp16"
    eleven = SimpleNamespace(__version__="11.0.0", BuilderFlag=SimpleNamespace())
    with pytest.raises(BackendUnavailable, match=r"TensorRT 11\.0\.0 builds fp16 only from strongly typed"):
        fp16_flag(eleven)


def test_onnx_runtime_falling_back_to_the_cpu_is_refused_not_run_slowly(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from engines.asr import onnxruntime_backend

    class _Session:
        def __init__(self, path: str, sess_options: Any, providers: list[str]) -> None:
            self.providers = ["CPUExecutionProvider"]  # what ONNX Runtime does when libcudnn is missing

        def get_providers(self) -> list[str]:
            return self.providers

    fake_ort = SimpleNamespace(
        get_available_providers=lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"],
        SessionOptions=lambda: SimpleNamespace(),
        GraphOptimizationLevel=SimpleNamespace(ORT_ENABLE_ALL=99),
        InferenceSession=_Session,
    )
    monkeypatch.setattr(onnxruntime_backend, "_import_onnxruntime", lambda: fake_ort)
    graph = tmp_path / "encoder-fp16.onnx"
    graph.write_bytes(b"onnx")
    with pytest.raises(
        BackendUnavailable, match=r"runs encoder-fp16\.onnx on CPUExecutionProvider, not CUDA"
    ):
        onnxruntime_backend.OrtGraphRunner(graph, device="cuda")


def test_a_jetson_without_nvidia_smi_is_still_seen_as_having_a_gpu(tmp_path: Path) -> None:
    from engines.gpu import nvidia_gpu_evidence

    assert nvidia_gpu_evidence(tmp_path) is None
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/nv_tegra_release").write_text("# R36 (release), REVISION: 4.0\n")
    assert nvidia_gpu_evidence(tmp_path) == "/etc/nv_tegra_release"
