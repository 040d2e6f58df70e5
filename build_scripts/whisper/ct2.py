"""Read a CTranslate2 / faster-whisper Whisper folder (``model.bin`` + ``config.json``) with numpy.

``model.bin`` layout (CTranslate2's serializer): binary version, model name, revision, variable count,
then per variable its name, rank, shape, dtype id, byte count and raw bytes; then aliases.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import BinaryIO

import numpy as np

from build_scripts.whisper.checkpoint import TokenConfig, WhisperCheckpoint, WhisperDims, check_canonical
from engines.errors import ModelFileError

# Order of CTranslate2's DataType enum; bfloat16 has no numpy type and is not used by Whisper exports.
_DTYPES: tuple[type[np.generic] | None, ...] = (
    np.float32,
    np.int8,
    np.int16,
    np.int32,
    np.float16,
    None,
)
_SUPPORTED_BINARY_VERSIONS = (5, 6)


def _read(handle: BinaryIO, fmt: str) -> tuple[int, ...]:
    size = struct.calcsize(fmt)
    data = handle.read(size)
    if len(data) != size:
        raise EOFError
    return struct.unpack(fmt, data)


def _read_string(handle: BinaryIO) -> str:
    (length,) = _read(handle, "<H")
    return handle.read(length)[:-1].decode("utf-8")


def read_model_bin(path: Path) -> dict[str, np.ndarray]:
    """All variables of a CTranslate2 ``model.bin``, aliases resolved."""
    variables: dict[str, np.ndarray] = {}
    try:
        with path.open("rb") as handle:
            (version,) = _read(handle, "<I")
            if version not in _SUPPORTED_BINARY_VERSIONS:
                raise ModelFileError(
                    f"{path}: CTranslate2 binary version {version} is not supported "
                    f"(supported: {', '.join(map(str, _SUPPORTED_BINARY_VERSIONS))})",
                    fix="convert the model with ctranslate2 4.x",
                )
            name = _read_string(handle)
            if name != "WhisperSpec":
                raise ModelFileError(f"{path} is a CTranslate2 {name}, not a Whisper model")
            _read(handle, "<I")  # spec revision
            (count,) = _read(handle, "<I")
            for _ in range(count):
                var_name = _read_string(handle)
                (rank,) = _read(handle, "<B")
                shape = _read(handle, f"<{rank}I") if rank else ()
                (dtype_id,) = _read(handle, "<B")
                (num_bytes,) = _read(handle, "<I")
                dtype = _DTYPES[dtype_id] if dtype_id < len(_DTYPES) else None
                if dtype is None:
                    raise ModelFileError(f"{path}: variable {var_name} has unsupported dtype id {dtype_id}")
                raw = handle.read(num_bytes)
                if len(raw) != num_bytes:
                    raise EOFError
                variables[var_name] = np.frombuffer(raw, dtype=dtype).reshape(shape)
            (alias_count,) = _read(handle, "<I")
            for _ in range(alias_count):
                alias = _read_string(handle)
                variables[alias] = variables[_read_string(handle)]
    except FileNotFoundError as err:
        raise ModelFileError(f"{path} does not exist", fix="point to a CTranslate2 Whisper folder") from err
    except (EOFError, ValueError, UnicodeDecodeError) as err:
        raise ModelFileError(
            f"{path} is truncated or not a CTranslate2 model ({type(err).__name__})",
            fix="re-assemble it: python -m build_scripts bundle --out DIR",
        ) from err
    return variables


def _count_layers(variables: dict[str, np.ndarray], prefix: str) -> int:
    pattern = re.compile(rf"^{prefix}/layer_(\d+)/")
    return len({m.group(1) for name in variables if (m := pattern.match(name))})


def load_ct2_folder(folder: Path) -> WhisperCheckpoint:
    variables = read_model_bin(folder / "model.bin")
    if "int8" in {str(v.dtype) for k, v in variables.items() if k.endswith("/weight")}:
        raise ModelFileError(
            f"{folder}: int8-quantized CTranslate2 weights cannot be exported",
            fix="use a float16 or float32 CTranslate2 conversion",
        )
    tensors = {k: v.astype(np.float32) for k, v in variables.items() if v.ndim > 0}
    config_path = folder / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    enc_state = tensors["encoder/conv1/weight"].shape[0]
    dec_state = tensors["decoder/embeddings/weight"].shape[1]
    dims = WhisperDims(
        n_mels=tensors["encoder/conv1/weight"].shape[1],
        n_audio_ctx=tensors["encoder/position_encodings/encodings"].shape[0],
        n_audio_state=enc_state,
        n_audio_head=int(variables["encoder/num_heads"]),
        n_audio_layer=_count_layers(variables, "encoder"),
        n_vocab=tensors["decoder/embeddings/weight"].shape[0],
        n_text_ctx=tensors["decoder/position_encodings/encodings"].shape[0],
        n_text_state=dec_state,
        n_text_head=int(variables["decoder/num_heads"]),
        n_text_layer=_count_layers(variables, "decoder"),
    )
    tokens = TokenConfig(
        suppress_ids=tuple(config.get("suppress_ids", ())),
        suppress_ids_begin=tuple(config.get("suppress_ids_begin", ())),
        lang_ids=tuple(config.get("lang_ids", ())),
    )
    ckpt = WhisperCheckpoint(dims=dims, tensors=tensors, tokens=tokens, source_format="ctranslate2")
    check_canonical(ckpt)
    return ckpt
