"""Subcommands. Each module has ``register(subparsers)`` setting ``handler`` to a function
returning the exit code."""

from __future__ import annotations

from types import ModuleType

from appliance.commands import (
    admin,
    bundle,
    calibrate,
    chat,
    config,
    doctor,
    facts,
    run,
    say,
    talk,
    transcribe,
    vad,
)

COMMANDS: tuple[ModuleType, ...] = (
    run,
    talk,
    transcribe,
    say,
    vad,
    chat,
    config,
    facts,
    bundle,
    doctor,
    admin,
    calibrate,
)
