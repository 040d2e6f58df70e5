"""Which KV sequence (slot) a conversation's turn runs on, and what that slot's cache holds.

Every slot starts with the system prefix, which is never removed. A conversation keeps the slot it
last used (found by its key), so its next turn finds its whole history cached. A turn without a key,
or of a conversation without a slot, takes the free slot whose cache shares the longest prefix with
its prompt; when every slot belongs to some conversation, the least recently used idle one is taken
over (its conversation, if it speaks again, is evaluated anew). A slot running a job is never taken.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class Slot:
    seq: int  # llama.cpp sequence id
    tokens: list[int]  # mirror of what this sequence's KV cache holds, in order
    conversation: str | None = None  # the conversation that owns it; None: free
    busy: bool = False  # a job is running on it
    last_used: int = 0
    # Positions [start, end) that a prefill evaluated and no turn has used yet.
    prefill_span: tuple[int, int] | None = None

    def keep(self, length: int) -> int:
        """Forget what the mirror holds from ``length`` on (the caller truncates the sequence);
        how many prefilled tokens that throws away."""
        del self.tokens[length:]
        if self.prefill_span is None:
            return 0
        start, end = self.prefill_span
        discarded = max(0, end - max(length, start))
        self.prefill_span = None if length <= start else (start, min(end, length))
        return discarded


@dataclass
class SlotTable:
    count: int
    system_tokens: list[int]
    slots: list[Slot] = field(init=False)
    evictions: int = 0  # slots taken over from an idle conversation
    _clock: int = 0

    def __post_init__(self) -> None:
        self.slots = [Slot(seq, list(self.system_tokens)) for seq in range(self.count)]

    @property
    def busy(self) -> int:
        return sum(slot.busy for slot in self.slots)

    def owned_by(self, conversation: str | None) -> Slot | None:
        if conversation is None:
            return None
        return next((slot for slot in self.slots if slot.conversation == conversation), None)

    def claim(self, conversation: str | None, prompt: Sequence[int]) -> Slot | None:
        """The slot for a job of ``conversation`` with ``prompt``, marked busy; None while it has
        to wait (its own slot is busy, or every slot is)."""
        slot = self.owned_by(conversation)
        if slot is not None:
            return None if slot.busy else self._take(slot, conversation)
        idle = [slot for slot in self.slots if not slot.busy]
        free = [slot for slot in idle if slot.conversation is None]
        if free:
            best = max(free, key=lambda s: (common_prefix_length(s.tokens, prompt), -s.last_used))
            return self._take(best, conversation)
        if not idle:
            return None
        self.evictions += 1
        return self._take(min(idle, key=lambda s: s.last_used), conversation)

    def release(self, slot: Slot) -> None:
        slot.busy = False

    def forget(self, conversation: str) -> None:
        """The conversation ended: its slot becomes free (its cache stays, for prefix reuse)."""
        slot = self.owned_by(conversation)
        if slot is not None:
            slot.conversation = None

    def _take(self, slot: Slot, conversation: str | None) -> Slot:
        self._clock += 1
        slot.conversation = conversation
        slot.busy = True
        slot.last_used = self._clock
        return slot


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    length = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        length += 1
    return length
