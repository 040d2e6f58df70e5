"""The local microphone's room, kept across starts (``audio.echo_room_file``).

The daemon's first reply after a start would otherwise meet a canceller that knows nothing of the
room: for its first seconds a person's short word over it ("wait") can be lost. The canceller's
linear filter is kept whenever it has been cancelling well, and the next start begins from it, if it
was learnt with the same devices and echo delay (``engines.aec.room``).
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from engines.aec import EchoRoom, RoomNotUsable, load_room, save_room

log = logging.getLogger(__name__)

# A filter is kept only when it left the echo at least this far below the microphone: one still
# learning, a room whose echo outlasts the filter (a reverberant hall: 6-9 dB in bench aec's), or one
# with no echo to learn (headphones, a muted speaker) never replaces a good one.
KEEP_DB = 12.0


def worth_keeping(room: EchoRoom | None) -> bool:
    """Whether ``room`` cancels enough (``KEEP_DB``) to be kept for the next start."""
    return room is not None and room.cancelled_db >= KEEP_DB


def room_key(audio: Any) -> dict[str, Any]:
    """What a kept room is only good for: these devices at this rate, aligned by this echo delay."""
    return {
        "input_device": audio.input_device,
        "output_device": audio.output_device,
        "device_sample_rate_hz": audio.device_sample_rate_hz,
        "echo_delay_ms": audio.echo_delay_ms,
    }


class RoomMemory:
    def __init__(self, path: Path, key: dict[str, Any]) -> None:
        self.path = path
        self.key = key
        self._warned = False

    def recall(self) -> EchoRoom | None:
        """The room kept by an earlier start, or None (logged: why the canceller learns it anew)."""
        try:
            room = load_room(self.path, self.key)
        except RoomNotUsable as why:
            log.info("echo canceller learns the room from the first reply: %s", why)
            return None
        learnt = datetime.fromtimestamp(room.learnt_at, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        log.info(
            "echo canceller starts from the room learnt %s (echo %.0f dB down), %s",
            learnt,
            room.cancelled_db,
            self.path,
        )
        return room

    def keep(self, room: EchoRoom | None) -> bool:
        """Write ``room`` when it cancels at least ``KEEP_DB``; whether it was written. A file that
        cannot be written is logged once and the session goes on."""
        if room is None or not worth_keeping(room):
            return False
        try:
            save_room(self.path, room, self.key)
        except OSError as err:
            if not self._warned:
                log.warning(
                    "cannot keep the echo canceller's room in %s (%s); the next start learns it anew "
                    "(fix: make the directory writable, or set audio.echo_room_file to a writable path)",
                    self.path,
                    err,
                )
                self._warned = True
            return False
        return True
