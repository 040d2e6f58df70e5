"""A GGUF's layout (read from a real file, stored as gzipped JSON) and random-weight GGUFs made from it."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from engines.errors import ModelFileError

LAYOUT_VERSION = 1

# Each quantized type's block (ggml's block structs): the standard deviation of weight / d when the
# quants are uniform random bytes, and where its float16 scale fields lie, each as a multiple of d.
# Random bytes elsewhere are valid quants; a random float16 scale could be inf or NaN, and without the
# right minimum (a multiple of d) every weight would lean one way and one token win every logit.
_BLOCKS: dict[str, tuple[float, tuple[tuple[int, float], ...]]] = {
    "Q4_0": (4.61, ((0, 1.0),)),
    "Q4_1": (4.61, ((0, 1.0), (2, -7.5))),
    "Q5_0": (9.23, ((0, 1.0),)),
    "Q5_1": (9.23, ((0, 1.0), (2, -15.5))),
    "Q8_0": (73.9, ((0, 1.0),)),
    "Q2_K": (9.8, ((80, 1.0), (82, 1.5))),
    "Q3_K": (42.3, ((108, 1.0),)),
    "Q4_K": (169.0, ((0, 1.0), (2, 7.5))),
    "Q5_K": (338.0, ((0, 1.0), (2, 15.5))),
    "Q6_K": (1365.0, ((208, 1.0),)),
}
WEIGHT_STD = 0.04  # about what trained transformer weights have


def _gguf() -> Any:
    try:
        import gguf
    except ImportError as err:
        raise ModelFileError(
            "the gguf package is missing", fix='pip install -e ".[dev]" (it brings gguf)'
        ) from err
    return gguf


def read_layout(path: Path) -> dict[str, Any]:
    """Everything in the GGUF at ``path`` but its tensor data."""
    gguf = _gguf()
    reader = gguf.GGUFReader(str(path))
    fields = []
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        types = [t.name for t in field.types]
        fields.append({"key": key, "types": types, "value": field.contents()})
    tensors = [
        {"name": t.name, "shape": [int(n) for n in t.shape], "type": t.tensor_type.name}
        for t in reader.tensors
    ]
    arch = reader.fields["general.architecture"].contents()
    return {"layout_version": LAYOUT_VERSION, "arch": arch, "fields": fields, "tensors": tensors}


def save_layout(layout: dict[str, Any], path: Path) -> Path:
    path.write_bytes(gzip.compress(json.dumps(layout, ensure_ascii=False).encode("utf-8"), mtime=0))
    return path


def load_layout(path: Path) -> dict[str, Any]:
    try:
        layout: dict[str, Any] = json.loads(gzip.decompress(path.read_bytes()))
    except (OSError, ValueError) as err:
        raise ModelFileError(
            f"{path} is not a GGUF layout ({err})",
            fix="make it again: python -m build_scripts.synthetic layout MODEL.gguf OUT.json.gz",
        ) from err
    if layout.get("layout_version") != LAYOUT_VERSION:
        raise ModelFileError(
            f"{path} is a GGUF layout of version {layout.get('layout_version')}, expected {LAYOUT_VERSION}",
            fix="make it again with this version of the project",
        )
    return layout


def _keep_layers(
    layout: dict[str, Any], layers: int | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    fields, tensors = list(layout["fields"]), list(layout["tensors"])
    if layers is None:
        return fields, tensors
    block_key = f"{layout['arch']}.block_count"
    fields = [dict(f, value=layers) if f["key"] == block_key else f for f in fields]
    block = re.compile(r"blk\.(\d+)\.")

    def kept(tensor: dict[str, Any]) -> bool:
        match = block.match(tensor["name"])
        return match is None or int(match.group(1)) < layers

    return fields, [t for t in tensors if kept(t)]


def _random_data(gguf: Any, tensor: dict[str, Any], rng: np.random.Generator) -> tuple[np.ndarray, Any]:
    """Tensor data in the writer's byte layout, and the raw type to declare (None for float arrays)."""
    kind = tensor["type"]
    ggml_shape = tensor["shape"]  # innermost first, as ggml counts
    numpy_shape = tuple(reversed(ggml_shape))
    if kind in ("F32", "F16"):
        dtype = np.float32 if kind == "F32" else np.float16
        if tensor["name"].endswith("norm.weight"):
            return np.ones(numpy_shape, dtype=dtype), None
        return (rng.standard_normal(numpy_shape, dtype=np.float32) * 0.02).astype(dtype), None
    if kind not in _BLOCKS:
        raise ModelFileError(
            f"tensor {tensor['name']} is of type {kind}, which random GGUFs do not make",
            fix=f"use a layout whose tensors are among {', '.join(sorted(_BLOCKS))}, F16, F32",
        )
    qtype = gguf.GGMLQuantizationType[kind]
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    rows = int(np.prod(numpy_shape[:-1], dtype=np.int64))
    blocks = rows * (numpy_shape[-1] // block_size)
    data = rng.integers(0, 256, size=(blocks, type_size), dtype=np.uint8)
    unit_std, scales = _BLOCKS[kind]
    for offset, factor in scales:
        value = np.float16(WEIGHT_STD / unit_std * factor)
        data[:, offset : offset + 2] = np.frombuffer(value.tobytes(), dtype=np.uint8)
    byte_shape = (*numpy_shape[:-1], numpy_shape[-1] // block_size * type_size)
    return data.reshape(byte_shape), qtype


def write_random_gguf(
    layout: dict[str, Any], path: Path, *, seed: int = 0, layers: int | None = None
) -> Path:
    """A GGUF at ``path`` with the layout's metadata and tensors of random values; ``layers`` keeps only
    the first that many transformer blocks (a smaller, faster model of the same family)."""
    gguf = _gguf()
    fields, tensors = _keep_layers(layout, layers)
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), layout["arch"])
    for field in fields:
        types = [gguf.GGUFValueType[name] for name in field["types"]]
        sub_type = types[1] if len(types) > 1 else None
        writer.add_key_value(field["key"], field["value"], types[0], sub_type)
    for tensor in tensors:
        data, raw_dtype = _random_data(gguf, tensor, rng)
        writer.add_tensor(tensor["name"], data, raw_dtype=raw_dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
