"""Keys that moved to a section of their own, and how a file or environment of an older version is read.

A moved key is read at its new place, with a notice naming both (``appliance config migrate FILE``
rewrites a file; the admin page moves a file's keys when it next writes it). Set at both places, the
key is a problem: which one was meant cannot be known.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

# (old section, new section, keys): each moved key keeps its name, but for those in _RENAMED.
_MOVES = (
    ("audio", "aec", ("echo_noise_suppression", "echo_high_pass")),
    ("vad", "echo_gate", ("threshold_while_playing", "gate_while_playing", "linear_ear",
                          "linear_threshold_while_playing")),
    ("endpointer", "overlap", ("overlap", "backchannel_max_ms", "backchannels", "stop_words", "unsure_logprob")),
    ("asr", "partials", ("partial_interval_ms", "partial_model")),
    ("llm", "partials", ("prefill",)),
    ("llm", "llm_server", ("server_url", "server_model", "allowed_hosts", "allow_public_server",
                           "server_api_key_file", "server_connect_timeout_s", "server_first_token_timeout_s",
                           "server_idle_timeout_s", "server_fallback", "server_retry_s")),
    ("agent", "conversation", ("max_history_messages", "fallback_reply", "busy_reply")),
    ("sip", "call", ("greeting", "keypad_timeout_ms", "silence_prompt_s", "silence_prompt", "silence_hangup_s",
                     "transfer_targets", "operator_digit", "operator_target", "transfer_preamble",
                     "transfer_failed_reply")),
)  # fmt: skip

_RENAMED = {"overlap.overlap": "overlap.mode"}

# "old_section.key" -> "new_section.key"
MOVED: dict[str, str] = {
    f"{old}.{key}": _RENAMED.get(f"{new}.{key}", f"{new}.{key}") for old, new, keys in _MOVES for key in keys
}


@dataclass(frozen=True)
class Move:
    old: str  # section.key
    new: str
    value: Any

    @property
    def old_section(self) -> str:
        return self.old.split(".", 1)[0]

    @property
    def new_section(self) -> str:
        return self.new.split(".", 1)[0]

    @property
    def old_key(self) -> str:
        return self.old.split(".", 1)[1]

    @property
    def key(self) -> str:
        return self.new.split(".", 1)[1]

    def __str__(self) -> str:
        return f"{self.old} is now {self.new}"


class SettingError(ValueError):
    """A problem of the settings as a whole that one key is to blame for (``key``: section.key)."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}")


class MovedTwice(SettingError):
    def __init__(self, move: Move) -> None:
        self.move = move
        super().__init__(move.old, f"moved to {move.new}, which is set too: remove {move.old}")


def moves_in(data: Mapping[str, Any]) -> list[Move]:
    """The moved keys ``data`` (section -> key -> value) holds at their old places."""
    found = []
    for old, new in MOVED.items():
        section, key = old.split(".", 1)
        values = data.get(section)
        if isinstance(values, Mapping) and key in values:
            found.append(Move(old, new, values[key]))
    return found


def moved(data: Mapping[str, Any]) -> tuple[dict[str, Any], list[Move]]:
    """``data`` with each moved key at its new place, and the moves; MovedTwice when a key is set at
    both places."""
    moves = moves_in(data)
    if not moves:
        return dict(data), []
    result = {name: dict(v) if isinstance(v, Mapping) else v for name, v in data.items()}
    for move in moves:
        target = result.setdefault(move.new_section, {})
        if not isinstance(target, dict):
            continue  # not a section: the schema names it
        if move.key in target:
            raise MovedTwice(move)
        target[move.key] = result[move.old_section].pop(move.old_key)
        if not result[move.old_section]:
            del result[move.old_section]  # as a file's edit removes a section left empty
    return result, moves


def file_changes(moves: list[Move]) -> dict[str, dict[str, Any]]:
    """The edits (section -> key -> value, None removes) that put a file's moved keys at their new
    places."""
    changes: dict[str, dict[str, Any]] = {}
    for move in moves:
        changes.setdefault(move.old_section, {})[move.old_key] = None
        changes.setdefault(move.new_section, {})[move.key] = move.value
    return changes


def moved_environment(env: Mapping[str, str | None], prefix: str) -> dict[str, str | None]:
    """Environment variables (names lower-cased, as the settings read them) with an older version's
    names given their new ones; a name whose new one is set too is left, for the settings to refuse."""
    prefix = prefix.lower()
    result = dict(env)
    for old, new in MOVED.items():
        old_name, new_name = (prefix + name.replace(".", "__") for name in (old, new))
        if old_name in result and new_name not in result:
            result[new_name] = result.pop(old_name)
            _notice_once(old, f"{old_name.upper()} is read as {new_name.upper()}; give it its new name")
    return result


_noticed: set[str] = set()


def _notice_once(key: str, message: str) -> None:
    if key not in _noticed:
        _noticed.add(key)
        log.warning("%s", message)


def notice(moves: list[Move]) -> None:
    """Log each move once per process (the settings are validated again on every admin page change)."""
    for move in moves:
        _notice_once(
            move.old,
            f"setting {move.old} is read as {move.new}; `appliance config migrate FILE` rewrites a file "
            "with the new names",
        )
