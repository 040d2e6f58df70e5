"""Daemon logging: journald fields (turn, session, stage) under systemd, plain lines elsewhere."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from appliance.service import (
    ContextFilter,
    JournaldHandler,
    configure_logging,
    journald_available,
    log_context,
)
from appliance.service.journal import PLAIN_FORMAT


class Captured:
    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []

    def send(self, message: str, **fields: Any) -> None:
        self.entries.append({"MESSAGE": message, **fields})


@pytest.fixture
def journal() -> Iterator[tuple[logging.Logger, Captured]]:
    captured = Captured()
    logger = logging.getLogger("appliance.test.journal")
    handler = JournaldHandler(captured.send)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield logger, captured
    logger.removeHandler(handler)
    logger.propagate = True


def test_context_fields_follow_the_turns_task_tree(journal: tuple[logging.Logger, Captured]) -> None:
    logger, captured = journal

    async def stage(name: str) -> None:
        with log_context(stage=name):
            logger.info("stage %s done", name)

    async def turn() -> None:
        with log_context(turn_id="t-42", session_id="sip-7"):
            await asyncio.gather(stage("asr"), stage("llm"))
        logger.warning("between turns")

    asyncio.run(turn())
    by_message = {entry["MESSAGE"]: entry for entry in captured.entries}
    asr = by_message["stage asr done"]
    assert (asr["TURN_ID"], asr["SESSION_ID"], asr["STAGE"]) == ("t-42", "sip-7", "asr")
    assert by_message["stage llm done"]["STAGE"] == "llm"
    assert asr["PRIORITY"] == "6"
    assert asr["SYSLOG_IDENTIFIER"] == "appliance"
    assert asr["LOGGER"] == "appliance.test.journal"
    between = by_message["between turns"]
    assert between["PRIORITY"] == "4"
    assert "TURN_ID" not in between and "STAGE" not in between


def test_explicit_extra_wins_and_exceptions_are_kept(journal: tuple[logging.Logger, Captured]) -> None:
    logger, captured = journal
    with log_context(turn_id="t-1"):
        try:
            raise ValueError("decoder output is empty")
        except ValueError:
            logger.exception("asr failed", extra={"turn_id": "t-2", "stage": "asr"})
    entry = captured.entries[-1]
    assert entry["TURN_ID"] == "t-2"
    assert entry["STAGE"] == "asr"
    assert entry["PRIORITY"] == "3"
    assert "ValueError: decoder output is empty" in entry["MESSAGE"]


def test_plain_lines_carry_the_same_context() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(ContextFilter())
    handler.setFormatter(logging.Formatter(PLAIN_FORMAT))
    logger = logging.getLogger("appliance.test.plain")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        with log_context(turn_id="t-9", stage="tts"):
            logger.warning("slow first clause")
        logger.warning("idle")
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    first, second = stream.getvalue().splitlines()
    assert first.endswith("slow first clause [turn=t-9 stage=tts]")
    assert second.endswith("appliance.test.plain: idle")


def test_journald_is_used_only_when_stderr_is_the_journal_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stat = os.fstat(sys.stderr.fileno())
    assert journald_available({}) is False
    assert journald_available({"JOURNAL_STREAM": "1:2"}) is False
    assert journald_available({"JOURNAL_STREAM": "not-a-stream"}) is False
    has_systemd_python = True
    try:
        __import__("systemd.journal")
    except ImportError:
        has_systemd_python = False
    assert journald_available({"JOURNAL_STREAM": f"{stat.st_dev}:{stat.st_ino}"}) is has_systemd_python


def test_configure_logging_outside_systemd_is_plain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    try:
        assert configure_logging(logging.DEBUG) == "plain"
        assert root.level == logging.DEBUG
        assert len(root.handlers) == 1
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved_handlers:
            root.addHandler(handler)
        root.setLevel(saved_level)
