"""The command line: every documented subcommand is listed by --help and parses its arguments."""

from __future__ import annotations

import subprocess
import sys

import pytest

from appliance.cli import build_parser, main

DOCUMENTED = ["run", "talk", "transcribe", "say", "vad", "chat", "config", "bundle", "doctor", "admin"]


def test_help_lists_every_subcommand() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "appliance", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for name in DOCUMENTED:
        assert f"    {name} " in out


@pytest.mark.parametrize(
    "argv",
    [
        ["run"],
        ["talk", "x.wav"],
        ["transcribe", "x.wav"],
        ["say", "hi", "-o", "x.wav"],
        ["vad", "x.wav"],
        ["chat", "hi"],
    ],
)
def test_subcommands_parse(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert callable(args.handler)


def test_unknown_subcommand_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2
