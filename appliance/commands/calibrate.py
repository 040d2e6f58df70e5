"""appliance calibrate: measure the echo delay of the speaker and microphone and write it to the
site configuration (``audio.echo_delay_ms``), for the echo canceller.

Plays three short chirps on the configured speaker while listening on the configured microphone; the
daemon must not be running (it holds both devices).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from appliance.commands.common import EXIT_FAILED, EXIT_OK, add_config_option, settings_or_exit

TIMEOUT_S = 60.0  # five batches of three chirps on a busy machine


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "calibrate", help="measure the speaker-to-microphone echo delay and write audio.echo_delay_ms"
    )
    add_config_option(parser)
    parser.add_argument(
        "--dry-run", action="store_true", help="measure and print, but leave the configuration file as it is"
    )
    parser.add_argument(
        "--repeats", type=int, default=3, choices=range(2, 10), metavar="N", help="chirps (3)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    settings = settings_or_exit(args)
    from appliance.audio.calibrate import Calibration, CalibrationError, measure_echo_delay
    from appliance.audio.devices import AudioDeviceError, MicrophoneSource, SpeakerSink

    audio = settings.audio
    source = MicrophoneSource(audio.input_device, device_sample_rate_hz=audio.device_sample_rate_hz)
    sink = SpeakerSink(audio.output_device, device_sample_rate_hz=audio.device_sample_rate_hz)

    async def measure() -> Calibration:
        try:
            return await asyncio.wait_for(measure_echo_delay(source, sink, repeats=args.repeats), TIMEOUT_S)
        finally:
            await source.close()
            await sink.close()

    try:
        result = asyncio.run(measure())
    except (CalibrationError, AudioDeviceError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    except asyncio.TimeoutError:
        print(
            f"error: calibration did not finish in {TIMEOUT_S:.0f} s (fix: check that the microphone "
            "delivers audio in real time and that the daemon is stopped)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    written = None if args.dry_run or args.config is None else _write(args, result.delay_ms)
    if args.json:
        record = {
            "echo_delay_ms": result.delay_ms,
            "delays_ms": result.delays_ms,
            "spread_ms": result.spread_ms,
            "snr": result.snr,
            "steady": result.steady,
            "written_to": written,
        }
        print(json.dumps(record))
    else:
        chirps = ", ".join(f"{d:.1f}" for d in result.delays_ms)
        print(
            f"echo delay {result.delay_ms:.1f} ms (chirps: {chirps} ms; correlation {result.snr:.0f}x its median)"
        )
        if not result.steady:
            print(
                f"warning: the chirps differ by {result.spread_ms:.0f} ms: this device's latency varies "
                "(USB or Bluetooth audio?); the canceller follows small changes by itself"
            )
        if written:
            print(f"wrote audio.echo_delay_ms = {result.delay_ms} to {written}")
        elif not args.dry_run:
            print("not written: pass --config FILE (the site configuration) to keep it")
    return EXIT_OK


def _write(args: argparse.Namespace, delay_ms: float) -> str:
    from appliance.admin.config_file import apply_changes

    apply_changes(args.config, {"audio": {"echo_delay_ms": delay_ms}})
    return str(args.config)
