"""The command line: every documented subcommand is listed by --help and parses its arguments."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from appliance.cli import build_parser, main

DOCUMENTED = [
    "run",
    "talk",
    "transcribe",
    "say",
    "vad",
    "chat",
    "config",
    "bundle",
    "doctor",
    "admin",
    "facts",
]


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
        ["facts", "test", "facts.md", "questions.tsv", "--spoken"],
    ],
)
def test_subcommands_parse(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert callable(args.handler)


def test_unknown_subcommand_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2


def test_doctor_says_what_config_check_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A technician trusts doctor: it ran none of the configuration's start checks ("ok config" for a
    facts file that is not there)."""
    config = tmp_path / "site.toml"
    config.write_text(
        '[[agent.tools]]\nname = "site"\nkind = "facts"\nfile = "/nonexistent/facts.md"\ndescription = "x"\n'
    )
    assert main(["doctor", "--config", str(config)]) == 1
    out = capsys.readouterr().out
    assert "FAIL  config:" in out and "agent.tools[0].file" in out and "does not exist" in out


def test_doctor_shows_the_fingerprints_a_technician_compares(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The admin page on a LAN address and SIP over TLS: doctor names the certificate each presents."""
    from appliance.certificates import device_certificate, fingerprint_of

    tls_dir = tmp_path / "tls"
    config = tmp_path / "site.toml"
    config.write_text(
        f'[admin]\nenabled = true\nbind_host = "192.0.2.10"\ntls_dir = "{tls_dir}"\n'
        "[sip]\nenabled = true\ntls = true\nport = 0\ntls_port = 0\n"
    )
    main(["doctor", "--config", str(config)])
    before = capsys.readouterr().out
    assert "made at the daemon's first start" in before, before
    cert, _ = device_certificate(tls_dir, "kiosk-1", "192.0.2.10")
    main(["doctor", "--config", str(config)])
    out = capsys.readouterr().out
    shown = fingerprint_of(cert)
    assert f"https://192.0.2.10:8080/, device certificate {shown}" in out, out
    assert f"device certificate {shown}; the phone system's certificate checked" in out, out
