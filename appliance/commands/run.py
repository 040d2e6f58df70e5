"""appliance run: the daemon.

With a microphone it listens until SIGINT/SIGTERM. Without one (``audio.input = "auto"`` and no
capture device) it still shows one full turn: a question spoken with the bundle's voice is fed in as
if from a microphone, the reply is written to a WAV in the state folder and described, and it exits.

Under systemd (``Type=notify``, appliance.service): STATUS while loading, READY once the engines are
loaded and warmed, WATCHDOG from the event loop, STATUS after each turn, STOPPING on the way out.
The daemon itself is composed in ``appliance.daemon.service``.
"""

from __future__ import annotations

import argparse
import logging
import sys

from appliance.commands.common import EXIT_CONFIG, EXIT_OK, add_config_option
from appliance.config import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("run", help="run the daemon (microphone/speaker, SIP, admin page)")
    add_config_option(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from appliance.daemon import service as daemon
    from appliance.daemon.crash_guard import CrashGuard
    from appliance.daemon.start_plan import plan_start
    from appliance.service import configure_logging, run_service
    from appliance.service.airgap import guard_name_lookups
    from appliance.service.runner import EXIT_RESTART

    configure_logging(logging.getLogger().level)
    guard_name_lookups()
    try:
        plan = plan_start(args.config)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_CONFIG

    loaded: list[daemon.Daemon] = []

    def load() -> daemon.Daemon:
        loaded.append(daemon.load_with_fallback(plan, config_path=args.config))
        return loaded[-1]

    code = run_service(load, daemon.serve, daemon.close)
    if code in (EXIT_OK, EXIT_RESTART) and loaded:  # no crash of the bundle's (appliance.daemon.crash_guard)
        CrashGuard.of(loaded[-1].settings.bundle).ended_cleanly()
    return code
