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
    media_dropped: int = 0  # RTP from a source that is not the call's (not the SDP's address, or not latched)
    keys_refused: int = 0  # keypad keys past the per-call gate (not a key, too fast, too many)
    srtp_rejected: int = 0  # SRTP packets that failed authentication or replayed one
    tls_failed: int = 0  # our TLS connections to the registrar that failed (handshake, certificate, pin)
    tls_failed_incoming: int = 0  # connections to our TLS listener whose handshake failed

    def counters(self) -> dict[str, int]:
        """What /metrics shows (appliance_sip_events_total by kind)."""
        return {
            name: getattr(self, name)
            for name in (
                "malformed",
                "rejected",
                "forbidden",
                "busy",
                "internal_errors",
                "media_dropped",
                "keys_refused",
                "srtp_rejected",
                "tls_failed",
                "tls_failed_incoming",
            )
        }
