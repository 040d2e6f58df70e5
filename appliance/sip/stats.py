"""What the SIP server counts (shown in logs and read by tests and benchmarks)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ServerStats:
    datagrams: int = 0
    stream_messages: int = 0
    malformed: int = 0
    rejected: int = 0
    forbidden: int = 0
    busy: int = 0
    calls_started: int = 0
    calls_ended: int = 0
    internal_errors: int = 0
