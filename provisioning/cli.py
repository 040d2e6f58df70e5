"""python -m provisioning: the field technician's tool, and the factory's signing commands."""

from __future__ import annotations

import argparse
import fcntl
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from provisioning.context import DEFAULT_STATE_DIR, TARGETS, ProvisioningContext, SiteOptions
from provisioning.framework import (
    BLOCKED,
    DONE,
    FAILED,
    INTERRUPTED,
    RUNNING,
    SKIPPED,
    StateStore,
    StepRecord,
)

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
LOCK_NAME = ".lock"


def _add_run_parser(sub: argparse._SubParsersAction) -> None:
    from provisioning.steps import STEP_NAMES

    run = sub.add_parser("run", help="provision this device: every step, resuming where it stopped")
    run.add_argument("--target", choices=TARGETS, default="jetson", help="jetson (default) or cpu")
    run.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR, help="state and report folder")
    run.add_argument(
        "--system-root", type=Path, default=Path("/"), help="install into this root (image builds)"
    )
    run.add_argument("--media", type=Path, help="folder with the signed engine bundle (removable media)")
    run.add_argument("--signature", type=Path, help="signature file (default: MEDIA/manifest.json.sig)")
    run.add_argument(
        "--trusted-key", type=Path, help="public key (default: /etc/appliance/bundle-signing.pub)"
    )
    site = run.add_argument_group("site configuration")
    site.add_argument("--site-file", type=Path, help="TOML with any appliance configuration keys")
    site.add_argument(
        "--clone",
        type=Path,
        metavar="EXPORT",
        help="set up like the first device: its export folder (python -m provisioning export)",
    )
    site.add_argument(
        "--site-key", type=Path, help="the site's public key (default: /etc/appliance/site-signing.pub)"
    )
    site.add_argument("--site-name")
    site.add_argument("--device-id")
    site.add_argument("--language")
    site.add_argument("--persona", help="system prompt; {site_name} is replaced")
    site.add_argument("--input-device", help="microphone (sounddevice name, or ALSA name like hw:1,0)")
    site.add_argument("--output-device", help="speaker")
    site.add_argument("--no-audio", action="store_true", help="no local microphone/speaker: phone calls only")
    site.add_argument("--sip", dest="sip_enabled", action="store_true", default=None, help="answer SIP calls")
    site.add_argument("--sip-bind-host")
    site.add_argument("--sip-port", type=int)
    site.add_argument("--sip-allow-from", action="append", default=[], metavar="CIDR")
    password = run.add_argument_group("admin password (never on the command line)")
    password.add_argument("--admin-password-file", type=Path)
    password.add_argument("--admin-password-stdin", action="store_true")
    control = run.add_argument_group("resuming")
    control.add_argument("--force", action="store_true", help="re-run every step")
    control.add_argument(
        "--from", dest="from_step", choices=STEP_NAMES, help="re-run this step and the later ones"
    )
    control.add_argument("--only", action="append", default=[], choices=STEP_NAMES, help="run only this step")
    run.add_argument("--no-progress", action="store_true", help="no progress bars")
    run.add_argument("--self-test-question", help="what the self-test asks")
    run.set_defaults(handler=_run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m provisioning", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_run_parser(sub)

    status = sub.add_parser("status", help="what is done, from the state folder")
    status.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    status.set_defaults(handler=_status)

    keygen = sub.add_parser("keygen", help="factory: make a bundle signing key pair")
    keygen.add_argument("--private", type=Path, required=True, help="private key to write (keep it secret)")
    keygen.add_argument("--public", type=Path, required=True, help="public key to install on the devices")
    keygen.set_defaults(handler=_keygen)

    export = sub.add_parser(
        "export", help="this device's site configuration and facts files, signed, to set up another"
    )
    export.add_argument("--out", type=Path, required=True, help="folder to write (removable media)")
    export.add_argument("--key", type=Path, required=True, help="the site's private key (from keygen)")
    export.add_argument("--system-root", type=Path, default=Path("/"), help="the device's root (tests)")
    export.set_defaults(handler=_export)

    sign = sub.add_parser("sign-bundle", help="factory: sign a bundle's manifest.json")
    sign.add_argument("--key", type=Path, required=True, help="private key (from keygen)")
    sign.add_argument("--out", type=Path, help="signature file (default: BUNDLE/manifest.json.sig)")
    sign.add_argument("bundle", type=Path)
    sign.set_defaults(handler=_sign)

    engines = sub.add_parser("build-engines", help="build missing TensorRT plans (appliance-engines.service)")
    engines.add_argument("--bundle", type=Path, required=True)
    engines.add_argument("--target", choices=(*TARGETS, "auto"), default="auto")
    engines.add_argument("--if-needed", action="store_true", help="only what is missing or stale")
    engines.set_defaults(handler=_build_engines)

    setpw = sub.add_parser("set-password", help="set the admin page password")
    setpw.add_argument("--file", type=Path, default=Path("/var/lib/appliance/admin-password"))
    setpw.add_argument("--stdin", action="store_true", help="read the new password from stdin")
    setpw.set_defaults(handler=_set_password)
    return parser


def _context(args: argparse.Namespace) -> ProvisioningContext:
    site = SiteOptions(
        site_file=args.site_file,
        site_name=args.site_name,
        device_id=args.device_id,
        language=args.language,
        persona=args.persona,
        input_device=args.input_device,
        output_device=args.output_device,
        no_audio=args.no_audio,
        sip_enabled=args.sip_enabled,
        sip_bind_host=args.sip_bind_host,
        sip_port=args.sip_port,
        sip_allow_from=args.sip_allow_from,
    )
    ctx = ProvisioningContext(
        target=args.target,
        state_dir=args.state_dir,
        system_root=args.system_root,
        media_dir=args.media,
        signature_file=args.signature,
        trusted_key=args.trusted_key,
        site=site,
        clone_dir=args.clone,
        site_key=args.site_key,
        password_file_in=args.admin_password_file,
        password_stdin=args.admin_password_stdin,
        progress=not args.no_progress,
    )
    if args.self_test_question:
        ctx.self_test_question = args.self_test_question
    return ctx


_MARK = {
    DONE: "done",
    SKIPPED: "done earlier",
    FAILED: "FAILED",
    BLOCKED: "blocked",
    INTERRUPTED: "INTERRUPTED",
}


def _print_record(title: str, record: StepRecord) -> None:
    if record.status == RUNNING:
        print(f"--> {title} ...", flush=True)
        return
    took = (
        f" ({record.duration_s:.1f} s)" if record.duration_s is not None and record.status != SKIPPED else ""
    )
    print(f"    {title}: {_MARK.get(record.status, record.status)}{took}", flush=True)
    if record.summary:
        print(f"      {record.summary}", flush=True)
    if record.status in (FAILED, INTERRUPTED):
        print(f"      problem: {record.error}", flush=True)
        print(f"      fix: {record.fix}", flush=True)


def _run(args: argparse.Namespace) -> int:
    ctx = _context(args)
    try:
        ctx.state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        print(
            f"error: cannot create the state folder {ctx.state_dir}: {err} (run as root, or pass --state-dir)"
        )
        return EXIT_USAGE
    with (ctx.state_dir / LOCK_NAME).open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(
                f"error: another provisioning run is using {ctx.state_dir}; wait for it to finish",
                file=sys.stderr,
            )
            return EXIT_USAGE
        try:
            previous = signal.signal(signal.SIGTERM, _interrupt)
        except ValueError:  # not the main thread: leave SIGTERM alone
            return _run_locked(args, ctx)
        try:
            return _run_locked(args, ctx)
        finally:
            signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # recorded as "interrupted" like Ctrl-C


def _run_locked(args: argparse.Namespace, ctx: ProvisioningContext) -> int:
    from provisioning.framework import run_steps
    from provisioning.steps import build_steps

    store = StateStore(ctx.state_dir)
    store.meta.update({"target": ctx.target, "system_root": str(ctx.system_root)})
    print(f"Provisioning for --target {ctx.target}; state in {ctx.state_dir}", flush=True)
    try:
        results = run_steps(
            build_steps(),
            ctx,
            store,
            force=args.force,
            from_step=args.from_step,
            only=args.only,
            report=_print_record,
        )
    except KeyboardInterrupt:
        print("interrupted: run the same command again to continue where it stopped", file=sys.stderr)
        return EXIT_INTERRUPTED
    asked = set(args.only) | {"report"} if args.only else set(results)
    failed = [name for name, rec in results.items() if name in asked and rec.status not in (DONE, SKIPPED)]
    report = results.get("report")
    if report is not None and report.outputs.get("text"):
        print(f"\nReport: {report.outputs['text']}")
    if failed:
        print(f"Not finished: {', '.join(failed)}. Fix the problems above and run the same command again.")
        return EXIT_FAILED
    print("Provisioning complete.")
    return EXIT_OK


def _status(args: argparse.Namespace) -> int:
    from provisioning.steps import STEP_NAMES, TITLES

    store = StateStore(args.state_dir)
    if not store.records:
        print(f"nothing recorded in {args.state_dir}")
        return EXIT_FAILED
    for name in STEP_NAMES:
        record = store.get(name)
        status = record.status if record else "not run"
        print(f"{TITLES.get(name, 'Report'):40s} {status:12s} {record.summary if record else ''}")
    return EXIT_OK


def _keygen(args: argparse.Namespace) -> int:
    from provisioning.signing import generate_keypair

    try:
        generate_keypair(args.private, args.public)
    except FileExistsError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    print(f"private key: {args.private} (mode 0600; keep it at the factory)")
    print(f"public key:  {args.public} (install on each device as /etc/appliance/bundle-signing.pub)")
    return EXIT_OK


def _export(args: argparse.Namespace) -> int:
    from provisioning.clone import SECRETS_NOTE, ExportError, export_site
    from provisioning.context import DEVICE_CONFIG_FILE
    from provisioning.files import under_root
    from provisioning.signing import SignatureError

    try:
        done = export_site(
            under_root(args.system_root, DEVICE_CONFIG_FILE), args.out, args.key, system_root=args.system_root
        )
    except ExportError as err:
        print(f"error: {err.message} (fix: {err.fix})", file=sys.stderr)
        return EXIT_FAILED
    except SignatureError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    facts = [rel for rel in done.files if rel != "appliance.toml"]
    print(
        f"exported to {done.folder}: the site configuration, {len(facts)} facts file(s), signed ({done.signer})"
    )
    print(f"bundle version: {done.bundle_version or 'unversioned (say which bundle the media holds)'}")
    print(
        f"on the new device: python -m provisioning run --clone {done.folder} --site-key SITE.pub --media BUNDLE ..."
    )
    print(SECRETS_NOTE)
    return EXIT_OK


def _sign(args: argparse.Namespace) -> int:
    from engines.errors import BundleError
    from engines.manifest import Manifest
    from provisioning.signing import SignatureError, sign_bundle

    try:
        problems = Manifest.read(args.bundle).verify(args.bundle, full=True)
        if problems:
            print(f"error: not signing a damaged bundle: {'; '.join(map(str, problems))}", file=sys.stderr)
            return EXIT_FAILED
        path = sign_bundle(args.bundle, args.key, out=args.out)
    except (SignatureError, BundleError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    print(f"signed: {path}")
    return EXIT_OK


def _build_engines(args: argparse.Namespace) -> int:
    from provisioning.engine_build import build_device_engines, tensorrt_installed
    from provisioning.framework import StepFailed

    target = args.target
    if target == "auto":
        target = "jetson" if tensorrt_installed() else "cpu"
    try:
        outcome = build_device_engines(target, args.bundle, progress=sys.stderr.isatty())
    except StepFailed as err:
        print(f"error: {err.message} (fix: {err.fix})", file=sys.stderr)
        return EXIT_FAILED
    print(outcome.summary)
    return EXIT_OK


def _set_password(args: argparse.Namespace) -> int:
    from provisioning.admin_password import read_new_password, set_password
    from provisioning.framework import StepFailed

    try:
        password = read_new_password(from_file=None, from_stdin=args.stdin, interactive=True)
        set_password(args.file, password)
    except StepFailed as err:
        print(f"error: {err.message} (fix: {err.fix})", file=sys.stderr)
        return EXIT_FAILED
    print(f"admin password set: {args.file}")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    code: int = args.handler(args)
    return code
