"""Whether the KV cache of ``slots`` conversations fits this device's memory, checked at load."""

from __future__ import annotations

from pathlib import Path

from engines.errors import InputError
from engines.llm.gguf import GgufInfo

_MIB = 1024 * 1024


def kv_cache_bytes(info: GgufInfo, *, slots: int, context_tokens: int) -> int | None:
    """Bytes of KV cache for ``slots`` sequences of ``context_tokens`` each (None: the file does not
    say its attention shape)."""
    per_token = info.kv_bytes_per_token
    return None if per_token is None else per_token * slots * context_tokens


def available_memory_bytes(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """What the kernel says can be allocated without swapping (on a Jetson the GPU shares it)."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_kv_fits(
    info: GgufInfo, *, slots: int, context_tokens: int, available: int | None = None
) -> int | None:
    """Raise ``InputError`` naming the keys to change when the weights plus the KV cache need more
    memory than is available; the KV cache's bytes otherwise."""
    kv = kv_cache_bytes(info, slots=slots, context_tokens=context_tokens)
    available = available_memory_bytes() if available is None else available
    if kv is None or available is None:
        return kv
    needed = kv + info.file_size_bytes
    if needed > available:
        raise InputError(
            f"llm.slots = {slots} conversations of llm.context_tokens = {context_tokens} need "
            f"{kv / _MIB:.0f} MiB of KV cache besides {info.file_size_bytes / _MIB:.0f} MiB of weights, "
            f"but only {available / _MIB:.0f} MiB of memory is available",
            fix="lower llm.slots or llm.context_tokens (or free memory)",
        )
    return kv
