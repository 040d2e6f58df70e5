"""The bounds behind the hostile-input tests, part by part: the keypad gate and INFO bodies, a
registrar's numbers, the digest's challenger, a bundle version's paths and manifest size, Whisper's
repetition loops and the scoring of long digit runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.daemon.bundle_view import bounded_meta
from appliance.rtp.keys import KeyGate
from appliance.sip.digest import Challenge, ExtensionSecret
from appliance.sip.indialog import info_key
from appliance.sip.register import bounded_seconds
from engines.asr.decoding import without_repeats
from engines.asr.text import normalize_text
from engines.bundle import Bundle
from engines.errors import BundleError
from engines.manifest import MAX_MANIFEST_BYTES, Artifact, Manifest, sha256_of
from tests.test_admin_parts import Clock


def test_the_key_gate_takes_keys_only_at_a_persons_pace_and_a_calls_worth() -> None:
    clock = Clock()
    gate = KeyGate("call", per_s=8, burst=16, per_call=40, clock=clock)
    assert not gate.admit("x", "SIP INFO") and not gate.admit("12", "SIP INFO")
    assert sum(gate.admit("5", "RTP") for _ in range(100)) == 16  # a burst, then nothing that second
    clock.now += 1.0
    assert sum(gate.admit("5", "RTP") for _ in range(100)) == 8
    clock.now += 100.0
    assert sum(gate.admit("#", "RTP") for _ in range(100)) == 16  # the call's 40 reached
    assert len(gate.admitted) == 40 and gate.refused == 2 + 84 + 92 + 84


@pytest.mark.parametrize(
    ("content_type", "body", "key"),
    [
        ("application/dtmf-relay", b"Signal=5\r\nDuration=160\r\n", "5"),
        ("application/dtmf-relay", b"Signal= #\r\n", "#"),
        ("application/dtmf", b"a", "A"),
    ],
)
def test_an_info_key_is_read(content_type: str, body: bytes, key: str) -> None:
    assert info_key(content_type, body) == key


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"Signal=hello\r\n", "not one keypad key"),
        (b"Signal=5\r\nDuration=" + b"9" * 5000, "Duration"),
        (b"Signal=5\r\nDuration=0", "Duration"),
        (b"Signal=5\r\nSignal=6", "one Signal= line"),
        (b"", "not one keypad key"),
    ],
)
def test_a_bad_info_body_is_refused_with_the_reason(body: bytes, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        info_key("application/dtmf-relay", body)


def test_a_registrars_numbers_are_bounded() -> None:
    assert bounded_seconds("3600", low=1, high=86400) == 3600
    assert bounded_seconds("9" * 5000, low=1, high=300) == 300  # never int() of 5,000 digits
    assert bounded_seconds("99999999", low=1, high=300) == 300
    assert bounded_seconds("0", low=20, high=300) == 20
    assert bounded_seconds("-5", low=1, high=300) is None and bounded_seconds("٣", low=1, high=9) is None


def test_only_the_registrar_with_its_realm_gets_the_extensions_digest() -> None:
    secret = ExtensionSecret("2301", "pw", ("10.0.0.2", 5060), realm="pbx.example")
    ours = Challenge(realm="pbx.example", nonce="n")
    assert secret.refusal(ours, ("10.0.0.2", 5060)) is None
    assert "only requests to the phone system" in (secret.refusal(ours, ("10.0.0.9", 5060)) or "")
    assert "only requests to the phone system" in (secret.refusal(ours, ("10.0.0.2", 5062)) or "")
    other_realm = Challenge(realm="anything", nonce="fixed")
    assert "realm" in (secret.refusal(other_realm, ("10.0.0.2", 5060)) or "")


def _version(folder: Path, path: str, *, size: int = 4) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "model.bin"
    target.write_bytes(b"x" * size)
    art = Artifact("asr/model", path, "onnx", sha256_of(target), size)
    (folder / "manifest.json").write_text(
        json.dumps({"format": 1, "meta": {}, "artifacts": [art.__dict__]}), encoding="utf-8"
    )
    return folder


@pytest.mark.parametrize("path", ["../outside.bin", "/etc/passwd", "a/../../outside.bin", "C:/x"])
def test_a_manifest_naming_a_path_outside_its_folder_is_refused(tmp_path: Path, path: str) -> None:
    with pytest.raises(BundleError, match=r"unsafe path .*not a relative path inside the bundle"):
        Bundle.open(_version(tmp_path / "v", path))


def test_a_link_out_of_the_version_folder_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "secret.bin"
    outside.write_bytes(b"xxxx")
    folder = _version(tmp_path / "v", "link.bin")
    (folder / "link.bin").symlink_to(outside)
    with pytest.raises(BundleError, match="reaches outside the bundle folder"):
        Bundle.open(folder)


def test_a_huge_manifest_is_not_read(tmp_path: Path) -> None:
    folder = tmp_path / "v"
    folder.mkdir()
    (folder / "manifest.json").write_bytes(b" " * (MAX_MANIFEST_BYTES + 1))
    with pytest.raises(BundleError, match="a manifest is at most"):
        Manifest.read(folder)


def test_the_bundle_summary_shows_only_short_meta() -> None:
    meta = {"built": "2026-12-01", "notes": "x" * 100_000, **{f"k{i}": i for i in range(100)}}
    shown = bounded_meta(meta)
    assert shown["built"] == "2026-12-01" and "notes" not in shown and len(shown) <= 32


def test_a_repetition_loop_is_cut_to_one_copy() -> None:
    assert without_repeats((1, 2, 3, 4, 5, 4, 5, 4, 5, 4, 5)) == (1, 2, 3, 4, 5)
    assert without_repeats((1, 2, 3) + (7,) * 40) == (1, 2, 3, 7)
    assert without_repeats((1, 2, 3, 4, 3, 4)) == (1, 2, 3, 4, 3, 4)  # said twice: kept


def test_a_long_run_of_digits_is_scored_digit_by_digit() -> None:
    assert normalize_text("1" * 7800) == " ".join(["one"] * 7800)  # int() refuses over 4300 digits
    assert normalize_text("42 and 7") == "forty two and seven"
