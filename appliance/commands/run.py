"""appliance run: the daemon.

With a microphone it listens until SIGINT/SIGTERM. Without one (``audio.input = "auto"`` and no
capture device) it still shows one full turn: a question spoken with the bundle's voice is fed in as
if from a microphone, the reply is written to a WAV in the state folder and described, and it exits.

Under systemd (``Type=notify``, appliance.service): STATUS while loading, READY once the engines are
loaded and warmed, WATCHDOG from the event loop, STATUS after each turn, STOPPING on the way out.
The daemon itself is composed in ``appliance.daemon``.
"""

from __future__ import annotations

import argparse
import logging
import sys

from appliance.commands.common import EXIT_CONFIG, EXIT_FAILED, add_config_option
from appliance.config import ConfigError, load_settings


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("run", help="run the daemon (microphone/speaker, SIP, admin page)")
    add_config_option(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from appliance import daemon, last_good

    notice: str | None = None
    try:
        settings = load_settings(args.config)
    except ConfigError as err:
        kept = last_good.fallback(args.config, str(err))
        if kept is None:
            print(f"error: {err}", file=sys.stderr)
            return EXIT_CONFIG
        settings, notice = kept
    from appliance.audio.devices import probe_device
    from appliance.service import configure_logging, run_service

    configure_logging(logging.getLogger().level)
    microphone: str | None = None
    reason = "audio.input is 'none'"
    if settings.audio.input != "none":
        probe = probe_device("input", settings.audio.input_device)
        if probe.available:
            microphone = probe.name
        elif settings.audio.input == "microphone":
            print(
                f"error: no microphone: {probe.reason} (fix: connect one and set audio.input_device "
                "to its sounddevice name or index, or set audio.input = 'auto')",
                file=sys.stderr,
            )
            return EXIT_FAILED
        else:
            reason = probe.reason

    def load() -> daemon.Daemon:
        return daemon.load_with_fallback(
            settings,
            microphone=microphone,
            no_microphone_reason=reason,
            config_path=args.config,
            notice=notice,
        )

    return run_service(load, daemon.serve, daemon.close)
