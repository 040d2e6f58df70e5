"""G.711 µ-law (PCMU) and A-law (PCMA) codecs, table-driven with numpy.

The tables are computed once at import from the ITU-T G.711 segment rules: decoding is a 256-entry
lookup, encoding a 65,536-entry lookup indexed by the 16-bit sample. Audio on the edges is float32 in
[-1, 1]; values outside are clipped.
"""

from __future__ import annotations

import numpy as np

_ULAW_BIAS = 0x84
_ULAW_CLIP = 8159  # largest 14-bit magnitude µ-law can represent
_ALAW_SEGMENT_ENDS = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF])
_ULAW_SEGMENT_ENDS = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF])


def _ulaw_decode_table() -> np.ndarray:
    code = ~np.arange(256, dtype=np.int32) & 0xFF
    magnitude = (((code & 0x0F) << 3) + _ULAW_BIAS) << ((code & 0x70) >> 4)
    return np.where(code & 0x80, _ULAW_BIAS - magnitude, magnitude - _ULAW_BIAS).astype(np.int16)


def _alaw_decode_table() -> np.ndarray:
    code = np.arange(256, dtype=np.int32) ^ 0x55
    segment = (code & 0x70) >> 4
    magnitude = (code & 0x0F) << 4
    magnitude = np.where(segment == 0, magnitude + 8, magnitude + 0x108)
    magnitude = np.where(segment > 1, magnitude << np.maximum(segment - 1, 0), magnitude)
    return np.where(code & 0x80, magnitude, -magnitude).astype(np.int16)


def _ulaw_encode_table() -> np.ndarray:
    pcm = np.arange(-32768, 32768, dtype=np.int32) >> 2  # 14-bit
    mask = np.where(pcm < 0, 0x7F, 0xFF)
    magnitude = np.minimum(np.where(pcm < 0, -pcm, pcm), _ULAW_CLIP) + (_ULAW_BIAS >> 2)
    segment = np.searchsorted(_ULAW_SEGMENT_ENDS, magnitude)  # first end >= magnitude
    value = (segment << 4) | ((magnitude >> (np.minimum(segment, 7) + 1)) & 0x0F)
    value = np.where(segment >= 8, 0x7F, value)
    return _by_uint16_index((value ^ mask).astype(np.uint8))


def _alaw_encode_table() -> np.ndarray:
    pcm = np.arange(-32768, 32768, dtype=np.int32) >> 3  # 13-bit
    mask = np.where(pcm >= 0, 0xD5, 0x55)
    magnitude = np.where(pcm >= 0, pcm, -pcm - 1)
    segment = np.searchsorted(_ALAW_SEGMENT_ENDS, magnitude)
    shift = np.where(segment < 2, 1, np.minimum(segment, 7))
    value = (np.minimum(segment, 7) << 4) | ((magnitude >> shift) & 0x0F)
    value = np.where(segment >= 8, 0x7F, value)
    return _by_uint16_index((value ^ mask).astype(np.uint8))


def _by_uint16_index(table_from_min: np.ndarray) -> np.ndarray:
    """Reorder a table built for samples -32768..32767 so it is indexed by the sample viewed as uint16."""
    return np.roll(table_from_min, -32768)


ULAW_DECODE = _ulaw_decode_table()
ALAW_DECODE = _alaw_decode_table()
ULAW_ENCODE = _ulaw_encode_table()
ALAW_ENCODE = _alaw_encode_table()


def float_to_int16(audio: np.ndarray) -> np.ndarray:
    scaled = np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0) * 32767.0
    return np.round(scaled).astype(np.int16)


def ulaw_encode_int16(samples: np.ndarray) -> bytes:
    return ULAW_ENCODE[np.asarray(samples, dtype=np.int16).view(np.uint16)].tobytes()


def alaw_encode_int16(samples: np.ndarray) -> bytes:
    return ALAW_ENCODE[np.asarray(samples, dtype=np.int16).view(np.uint16)].tobytes()


def ulaw_decode_int16(payload: bytes) -> np.ndarray:
    return ULAW_DECODE[np.frombuffer(payload, dtype=np.uint8)]


def alaw_decode_int16(payload: bytes) -> np.ndarray:
    return ALAW_DECODE[np.frombuffer(payload, dtype=np.uint8)]


def encode(audio: np.ndarray, codec: str) -> bytes:
    """Encode float32 audio in [-1, 1] as ``"PCMU"`` or ``"PCMA"`` bytes, one byte per sample."""
    table = _ENCODERS.get(codec.upper())
    if table is None:
        raise ValueError(f"unknown G.711 codec {codec!r}; use 'PCMU' or 'PCMA'")
    return table[float_to_int16(audio).view(np.uint16)].tobytes()


def decode(payload: bytes, codec: str) -> np.ndarray:
    """Decode ``"PCMU"`` or ``"PCMA"`` bytes to float32 audio in [-1, 1)."""
    table = _DECODERS.get(codec.upper())
    if table is None:
        raise ValueError(f"unknown G.711 codec {codec!r}; use 'PCMU' or 'PCMA'")
    return table[np.frombuffer(payload, dtype=np.uint8)].astype(np.float32) / 32768.0


_ENCODERS = {"PCMU": ULAW_ENCODE, "PCMA": ALAW_ENCODE}
_DECODERS = {"PCMU": ULAW_DECODE, "PCMA": ALAW_DECODE}
