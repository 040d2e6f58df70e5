"""The self-test step on the real engine bundle: one synthesized question through the real pipeline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engines.bundle import Bundle
from provisioning.cli import main
from provisioning.signing import generate_keypair, sign_bundle


@pytest.mark.slow
def test_self_test_turn_on_the_real_bundle(bundle: Bundle, tmp_path: Path) -> None:
    # The device's bundle folder points at the real bundle (1.6 GB, not copied); its signature is
    # kept outside it, since the real bundle folder is never written to.
    root, state = tmp_path / "root", tmp_path / "state"
    device_bundle = root / "var/lib/appliance/bundle"
    device_bundle.parent.mkdir(parents=True)
    device_bundle.symlink_to(bundle.root.resolve(), target_is_directory=True)
    generate_keypair(tmp_path / "factory.pem", tmp_path / "factory.pub")
    signature = sign_bundle(bundle.root, tmp_path / "factory.pem", out=tmp_path / "manifest.json.sig")
    (tmp_path / "pw").write_text("a long enough password\n")
    (tmp_path / "site.toml").write_text('[llm]\nmodel = "gemma-270m"\nmax_reply_tokens = 24\n')
    question = "What time does the site open tomorrow?"

    args = ["run", "--target", "cpu", "--no-progress", "--state-dir", str(state), "--system-root", str(root)]
    args += ["--signature", str(signature), "--trusted-key", str(tmp_path / "factory.pub")]
    args += ["--site-file", str(tmp_path / "site.toml"), "--site-name", "Test site"]
    args += ["--admin-password-file", str(tmp_path / "pw"), "--self-test-question", question]
    main(args)
    steps = json.loads((state / "state.json").read_text())["steps"]
    assert steps["bundle"]["status"] == "done", steps["bundle"]
    assert "kept the installed bundle" in steps["bundle"]["summary"]
    test = steps["self-test"]
    assert test["status"] == "done", test
    outputs = test["outputs"]
    assert outputs["transcript_word_overlap"] >= 0.5, outputs["transcript"]
    assert outputs["reply"].strip()
    assert 0 < outputs["turn_latency_s"] < 60
    assert isinstance(outputs["within_budget"], bool)
    assert Path(outputs["reply_wav"]).stat().st_size > 1000
    assert f"{outputs['budget_ms']} ms budget" in test["summary"]
    print(f"\nself-test: {test['summary']}")


@pytest.fixture(autouse=True)
def _real_bundle_is_untouched(bundle: Bundle) -> object:
    def snapshot() -> list[tuple[str, int, int]]:
        return sorted((p.name, p.stat().st_uid, p.stat().st_mode) for p in bundle.root.rglob("*"))

    before = snapshot()
    yield
    assert snapshot() == before  # nothing added, re-owned or re-moded in the real bundle
