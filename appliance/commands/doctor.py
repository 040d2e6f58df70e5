"""appliance doctor: can this machine run the appliance as configured? One line per check, with the fix."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from appliance.commands.common import EXIT_FAILED, EXIT_OK, add_config_option
from appliance.config import ConfigError, Settings, SipParams, load_settings


@dataclass(frozen=True)
class Finding:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "doctor", help="check the configuration, the bundle and that llama.cpp runs on this processor"
    )
    add_config_option(parser)
    parser.set_defaults(handler=handle)


def diagnose(args: argparse.Namespace) -> list[Finding]:
    try:
        settings = load_settings(args.config)
    except ConfigError as err:
        return [Finding("config", False, str(err), "correct the file: appliance config check FILE")]
    from appliance.daemon.start_check import check_start

    # Everything `appliance config check` checks (the bundle's models, the facts files, the trace
    # database, ports, accounts, audio devices): a technician trusts doctor.
    source = str(args.config or "the default configuration")
    refused = check_start(settings, config_path=args.config, ports_free=False).all
    if refused:
        listed = "; ".join(f"{p.key}: {p.message}" for p in refused)
        fix = f"appliance config check {args.config or ''} names each with its fix".replace("  ", " ")
        findings = [Finding("config", False, f"{source}: {listed}", fix)]
    else:
        findings = [Finding("config", True, f"{source}: every check of appliance config check passes")]
    if settings.sip.enabled and settings.sip.registrar:
        findings.append(_registration(settings.sip))
    if settings.admin.enabled:
        findings.append(_admin_page(settings))
    if settings.sip.enabled and settings.sip.tls_listening:
        findings.append(_sip_tls(settings))

    from engines.bundle_store import resolve_bundle_dir
    from engines.errors import BundleError
    from engines.manifest import Manifest

    try:
        bundle_dir = resolve_bundle_dir(settings.bundle.dir)
        problems = Manifest.read(bundle_dir).verify(bundle_dir, full=False)
    except BundleError as err:
        return [*findings, Finding("bundle", False, str(err))]
    if problems:
        listed = "; ".join(map(str, problems))
        fix = f"rebuild it: python -m build_scripts bundle --out {bundle_dir}"
        return [*findings, Finding("bundle", False, f"{bundle_dir}: {listed}", fix)]
    findings.append(
        Finding("bundle", True, f"{bundle_dir}: every file present (appliance bundle verify hashes them)")
    )

    from appliance.engine_set import LLAMA_FIX
    from engines.llm.smoke import library_location, run_smoke, smallest_gguf

    model = smallest_gguf(bundle_dir)
    if model is None:
        return [*findings, Finding("llama.cpp", False, f"no language model in {bundle_dir}")]
    result = run_smoke(model)
    detail = f"{result.detail} in {result.seconds:.1f} s ({library_location()})"
    findings.append(Finding("llama.cpp", result.ok, detail, "" if result.ok else LLAMA_FIX))
    return findings


def handle(args: argparse.Namespace) -> int:
    findings = diagnose(args)
    for finding in findings:
        print(f"{'ok' if finding.ok else 'FAIL':>4}  {finding.name}: {finding.detail}")
        if finding.fix:
            print(f"      fix: {finding.fix}")
    return EXIT_OK if all(f.ok for f in findings) else EXIT_FAILED


def _admin_page(settings: Settings) -> Finding:
    """How the admin page is served, and the certificate fingerprint a technician compares."""
    from appliance.admin.tls import TlsSetupError, admin_tls

    admin = settings.admin
    where = f"{admin.bind_host}:{admin.port}"
    try:
        tls = admin_tls(admin, settings.agent.device_id, make=False)
    except TlsSetupError as err:
        return Finding("admin page", False, str(err))
    if tls.enabled:
        return Finding("admin page", True, f"https://{where}/, {tls.source} certificate {tls.fingerprint}")
    if tls.source == "device":
        return Finding("admin page", True, f"https://{where}/: {tls.warning}")
    if tls.warning:
        return Finding("admin page", True, tls.warning)
    return Finding("admin page", True, f"http://{where}/ (loopback: nothing crosses a network)")


def _sip_tls(settings: Settings) -> Finding:
    """SIP over TLS: the certificate the listener presents, and how the phone system's is checked."""
    from appliance.certificates import DEVICE_CERT, TlsSetupError, fingerprint_of

    sip = settings.sip
    where = f"{sip.bind_host}:{sip.tls_port}"
    checked = (
        f"the phone system's certificate checked against {sip.tls_ca_file}"
        if sip.tls_ca_file
        else f"the phone system's certificate pinned to {sip.tls_peer_fingerprint}"
        if sip.tls_peer_fingerprint
        else "the phone system's certificate checked against this machine's CAs"
    )
    cert = sip.tls_cert_file or settings.admin.tls_dir / DEVICE_CERT
    if not cert.is_file():
        return Finding(
            "sip tls", True, f"{where}: the device certificate is made at the daemon's first start; {checked}"
        )
    try:
        shown = fingerprint_of(cert)
    except TlsSetupError as err:
        return Finding("sip tls", False, str(err))
    source = "site" if sip.tls_cert_file else "device"
    return Finding("sip tls", True, f"{where}, {source} certificate {shown}; {checked}")


def _registration(config: SipParams) -> Finding:
    import asyncio

    from appliance.sip.register import try_registration

    ok, detail = asyncio.run(try_registration(config))
    fix = (
        ""
        if ok
        else "check sip.registrar, sip.register_user and the password file against the PBX's extension"
    )
    return Finding("sip registration", ok, detail, fix)
