"""Which KV slot a conversation's turn gets (pure bookkeeping, no model) and the memory check of
slots x context at load."""

from __future__ import annotations

import pytest

from engines.bundle import Bundle
from engines.errors import InputError
from engines.llm.gguf import read_gguf
from engines.llm.memory import available_memory_bytes, check_kv_fits, kv_cache_bytes
from engines.llm.slots import SlotTable

SYSTEM = [1, 2, 3]


def test_a_conversation_keeps_its_slot_and_waits_while_it_is_busy() -> None:
    table = SlotTable(2, SYSTEM)
    first = table.claim("a", [*SYSTEM, 10])
    assert first is not None and first.conversation == "a"
    assert table.claim("a", [*SYSTEM, 10, 11]) is None  # its own slot is busy: wait, not another
    table.release(first)
    assert table.claim("a", [*SYSTEM, 10, 11]) is first


def test_a_new_conversation_takes_the_free_slot_sharing_most_of_its_prompt() -> None:
    table = SlotTable(3, SYSTEM)
    slot = table.claim(None, [*SYSTEM, 7, 8, 9])
    assert slot is not None
    slot.tokens = [*SYSTEM, 7, 8, 9, 5]
    table.release(slot)
    assert table.claim("b", [*SYSTEM, 7, 8, 4]) is slot


def test_when_every_slot_is_owned_the_least_recently_used_idle_one_is_taken_over() -> None:
    table = SlotTable(2, SYSTEM)
    a, b = table.claim("a", SYSTEM), table.claim("b", SYSTEM)
    assert a is not None and b is not None
    assert table.claim("c", SYSTEM) is None  # both generating: never taken
    table.release(b)
    table.release(a)
    taken = table.claim("c", SYSTEM)
    assert taken is a and taken.conversation == "c" and table.evictions == 1
    assert table.owned_by("a") is None  # a speaks again: evaluated anew
    table.forget("b")
    assert table.claim("d", SYSTEM) is b and table.evictions == 1  # a forgotten slot is free


def test_the_kv_cache_of_the_bundled_models_is_sized_from_their_metadata(bundle: Bundle) -> None:
    qwen = read_gguf(bundle.root / "llm" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
    # 28 layers x 2 KV heads x (128 + 128) dims x 2 bytes (f16)
    assert qwen.kv_bytes_per_token == 28 * 2 * 256 * 2
    assert kv_cache_bytes(qwen, slots=4, context_tokens=2048) == 4 * 2048 * 28 * 2 * 256 * 2
    gemma = read_gguf(bundle.root / "llm" / "gemma-3-270m-q4_k_m.gguf")
    assert gemma.kv_bytes_per_token == 18 * 1 * (256 + 256) * 2


def test_slots_that_do_not_fit_the_memory_are_refused_naming_the_keys(bundle: Bundle) -> None:
    qwen = read_gguf(bundle.root / "llm" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
    assert check_kv_fits(qwen, slots=2, context_tokens=2048, available=8 * 2**30) == 2 * 2048 * 28672
    with pytest.raises(InputError) as refused:
        check_kv_fits(qwen, slots=64, context_tokens=32768, available=8 * 2**30)
    assert "llm.slots" in str(refused.value) and "llm.context_tokens" in str(refused.value.fix)
    assert (available_memory_bytes() or 0) > 0
