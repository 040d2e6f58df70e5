"""Read a GGUF file's header without llama.cpp: metadata, tensor table, and a size check.

llama.cpp aborts or fails with a vague message on a file that is not a GGUF or is cut short;
reading the header here first turns both into a ``ModelFileError`` naming the file and the fix.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engines.errors import ModelFileError

GGUF_MAGIC = b"GGUF"
_DEFAULT_ALIGNMENT = 32
_ARRAY_KEEP_ITEMS = 64  # longer arrays (vocabularies) are recorded by length only

# llama.cpp's file types (enum llama_ftype), by the names its quantizer uses.
FILE_TYPES: dict[str, int] = {
    "F32": 0,
    "F16": 1,
    "Q4_0": 2,
    "Q4_1": 3,
    "Q8_0": 7,
    "Q5_0": 8,
    "Q5_1": 9,
    "Q2_K": 10,
    "Q3_K_S": 11,
    "Q3_K_M": 12,
    "Q3_K_L": 13,
    "Q4_K_S": 14,
    "Q4_K_M": 15,
    "Q5_K_S": 16,
    "Q5_K_M": 17,
    "Q6_K": 18,
    "IQ4_NL": 25,
    "IQ4_XS": 30,
    "BF16": 32,
}
FILE_TYPE_NAMES: dict[int, str] = {number: name for name, number in FILE_TYPES.items()}

# ggml tensor types: (elements per block, bytes per block).
_TENSOR_BLOCKS: dict[int, tuple[int, int]] = {
    0: (1, 4),  # F32
    1: (1, 2),  # F16
    2: (32, 18),  # Q4_0
    3: (32, 20),  # Q4_1
    6: (32, 22),  # Q5_0
    7: (32, 24),  # Q5_1
    8: (32, 34),  # Q8_0
    9: (32, 36),  # Q8_1
    10: (256, 84),  # Q2_K
    11: (256, 110),  # Q3_K
    12: (256, 144),  # Q4_K
    13: (256, 176),  # Q5_K
    14: (256, 210),  # Q6_K
    15: (256, 292),  # Q8_K
    20: (32, 18),  # IQ4_NL
    23: (256, 136),  # IQ4_XS
    24: (1, 1),  # I8
    25: (1, 2),  # I16
    26: (1, 4),  # I32
    27: (1, 8),  # I64
    28: (1, 8),  # F64
    30: (1, 2),  # BF16
}

# GGUF metadata value types: struct format of the scalar ones.
_SCALARS: dict[int, str] = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?"}
_SCALARS.update({10: "<Q", 11: "<q", 12: "<d"})
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int  # from the start of the data section

    def size_bytes(self) -> int | None:
        block = _TENSOR_BLOCKS.get(self.ggml_type)
        if block is None:
            return None
        elements = 1
        for dim in self.shape:
            elements *= dim
        per_block, block_bytes = block
        return -(-elements // per_block) * block_bytes


@dataclass(frozen=True)
class GgufInfo:
    path: Path
    version: int
    metadata: dict[str, Any]
    tensors: tuple[TensorInfo, ...]
    data_offset: int
    file_size_bytes: int
    required_size_bytes: int = field(default=0)

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    @property
    def file_type(self) -> int | None:
        value = self.metadata.get("general.file_type")
        return int(value) if value is not None else None

    @property
    def file_type_name(self) -> str:
        number = self.file_type
        if number is None:
            return "unknown"
        return FILE_TYPE_NAMES.get(number, f"type {number}")

    @property
    def context_length(self) -> int | None:
        value = self.metadata.get(f"{self.architecture}.context_length")
        return int(value) if value is not None else None

    @property
    def chat_template(self) -> str | None:
        value = self.metadata.get("tokenizer.chat_template")
        return str(value) if value else None

    @property
    def kv_bytes_per_token(self) -> int | None:
        """Bytes of KV cache one token position takes in every layer (f16 keys and values), from the
        attention shape in the metadata; None when the metadata does not give it."""
        arch = self.metadata
        prefix = f"{self.architecture}."
        layers = arch.get(prefix + "block_count")
        heads = arch.get(prefix + "attention.head_count")
        kv_heads = arch.get(prefix + "attention.head_count_kv", heads)
        width = arch.get(prefix + "embedding_length")
        if not isinstance(layers, int) or not isinstance(heads, int) or not heads:
            return None
        if isinstance(kv_heads, (list, tuple)):  # per-layer head counts
            kv_heads = max((int(h) for h in kv_heads), default=heads)
        if not isinstance(kv_heads, int):
            return None
        default_head = width // heads if isinstance(width, int) else None
        key = arch.get(prefix + "attention.key_length", default_head)
        value = arch.get(prefix + "attention.value_length", default_head)
        if key is None or value is None:
            return None
        return int(layers) * int(kv_heads) * (int(key) + int(value)) * 2


class _Reader:
    def __init__(self, buffer: mmap.mmap, path: Path) -> None:
        self.buffer = buffer
        self.path = path
        self.pos = 0

    def _need(self, count: int) -> None:
        if self.pos + count > len(self.buffer):
            raise ModelFileError(
                f"{self.path} is truncated: its GGUF header ends past the end of the file "
                f"({len(self.buffer)} bytes)",
                fix="copy the file again or rebuild the bundle",
            )

    def scalar(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        self._need(size)
        (value,) = struct.unpack_from(fmt, self.buffer, self.pos)
        self.pos += size
        return value

    def string(self) -> str:
        length = self.scalar("<Q")
        self._need(length)
        raw = self.buffer[self.pos : self.pos + length]
        self.pos += length
        return raw.decode("utf-8", errors="replace")

    def value(self, value_type: int) -> Any:
        if value_type in _SCALARS:
            return self.scalar(_SCALARS[value_type])
        if value_type == _STRING:
            return self.string()
        if value_type == _ARRAY:
            item_type = self.scalar("<I")
            count = self.scalar("<Q")
            return self._array(item_type, count)
        raise ModelFileError(f"{self.path}: unknown GGUF metadata type {value_type} at byte {self.pos}")

    def _array(self, item_type: int, count: int) -> Any:
        if item_type in _SCALARS and count > _ARRAY_KEEP_ITEMS:
            skip = struct.calcsize(_SCALARS[item_type]) * count
            self._need(skip)
            self.pos += skip
            return {"array_length": count}
        if item_type == _STRING and count > _ARRAY_KEEP_ITEMS:
            self._skip_strings(count)
            return {"array_length": count}
        return [self.value(item_type) for _ in range(count)]

    def _skip_strings(self, count: int) -> None:
        unpack, buffer, pos = struct.unpack_from, self.buffer, self.pos
        for _ in range(count):
            self.pos = pos
            self._need(8)
            pos += 8 + unpack("<Q", buffer, pos)[0]
        self.pos = pos
        self._need(0)


def read_gguf(path: Path) -> GgufInfo:
    """Parse the header of ``path``; raise ModelFileError for a missing, foreign or truncated file."""
    path = Path(path)
    if not path.is_file():
        raise ModelFileError(f"model file {path} not found", fix="build the bundle or check the path")
    file_size = path.stat().st_size
    if file_size < 8:
        raise _not_gguf(path, f"it is only {file_size} bytes")
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buffer:
        if buffer[:4] != GGUF_MAGIC:
            raise _not_gguf(path, f"it starts with {bytes(buffer[:4])!r}, not {GGUF_MAGIC!r}")
        reader = _Reader(buffer, path)
        reader.pos = 4
        version = reader.scalar("<I")
        if version not in (2, 3):
            raise ModelFileError(
                f"{path} is GGUF version {version}; this build reads versions 2 and 3",
                fix="convert the model with a current llama.cpp",
            )
        tensor_count = reader.scalar("<Q")
        kv_count = reader.scalar("<Q")
        metadata: dict[str, Any] = {}
        for _ in range(kv_count):
            key = reader.string()
            metadata[key] = reader.value(reader.scalar("<I"))
        tensors = []
        for _ in range(tensor_count):
            name = reader.string()
            dims = reader.scalar("<I")
            shape = tuple(reader.scalar("<Q") for _ in range(dims))
            tensors.append(TensorInfo(name, shape, reader.scalar("<I"), reader.scalar("<Q")))
        alignment = int(metadata.get("general.alignment", _DEFAULT_ALIGNMENT)) or _DEFAULT_ALIGNMENT
        data_offset = -(-reader.pos // alignment) * alignment
    required = data_offset + max((t.offset + (t.size_bytes() or 0) for t in tensors), default=0)
    if required > file_size:
        raise ModelFileError(
            f"{path} is truncated: its tensors need {required} bytes, the file has {file_size}",
            fix="copy the file again or rebuild the bundle",
        )
    return GgufInfo(path, version, metadata, tuple(tensors), data_offset, file_size, required)


def _not_gguf(path: Path, why: str) -> ModelFileError:
    return ModelFileError(
        f"{path} is not a GGUF model file ({why})",
        fix="point at a .gguf file (convert other formats with llama.cpp's convert_hf_to_gguf.py)",
    )
