"""Subcommands. Each module has ``register(subparsers)`` setting ``handler`` to a function
returning the exit code."""

from __future__ import annotations

from types import ModuleType

from appliance.commands import admin, bundle, calibrate, chat, config, doctor, run, say, talk, transcribe, vad

COMMANDS: tuple[ModuleType, ...] = (
    run,
    talk,
    transcribe,
    say,
    vad,
    chat,
    config,
    bundle,
    doctor,
    admin,
    calibrate,
)
