"""The canary on real bundles and real engines: a candidate measured against the active bundle, each in a
child process, on recordings from the test data; one that cannot load is refused with its figures and
cannot be activated unless forced, and a forced one goes back with one command."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from appliance.cli import main
from appliance.config import Settings, load_settings, override
from appliance.daemon.canary import evaluate, read_evaluation
from engines.bundle import Bundle
from engines.bundle_store import BundleStore
from engines.manifest import Artifact, Manifest, sha256_of

QUESTION = "speech/en/google_audio.wav"
FACTS = "# Brooklyn Bridge\nThe Brooklyn Bridge opened in 1883.\n\n# Canteen\nThe canteen opens at 7:30.\n"
RECORDINGS = {
    "speech/en/google_audio.wav": "how old is the Brooklyn Bridge",
    "speech/en/cheetah_test_en.wav": "Today only platforms one and three are used.",
    "speech/en/speechbrain_single-mic_example1.wav": "The birch canoe slid on the smooth planks",
}


def _linked_copy(bundle: Bundle, target: Path, release: str) -> Path:
    """The installed bundle as hard links (no 2 GB copy), its manifest its own (another version)."""
    subprocess.run(["cp", "-al", str(bundle.root), str(target)], check=True)
    (target / "manifest.json").unlink()  # a link to the installed manifest: replaced, not written through
    manifest = Manifest.read(bundle.root)
    manifest.meta["release"] = release
    manifest.write(target)
    return target


def _truncate_llm(folder: Path, name: str) -> None:
    manifest = Manifest.read(folder)
    art = manifest.artifacts[name]
    model = folder / art.path
    half = model.read_bytes()[: art.size_bytes // 2]
    model.unlink()
    model.write_bytes(half)
    manifest.add(Artifact(art.name, art.path, art.kind, sha256_of(model), len(half), art.source, art.build))
    manifest.write(folder)


@pytest.fixture(scope="module")
def site(
    bundle: Bundle, data_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Settings, Path, dict[str, str]]:
    work = tmp_path_factory.mktemp("canary")
    store = BundleStore(work / "bundles")
    versions = {}
    for release in ("active", "candidate", "broken"):
        folder = _linked_copy(bundle, work / release, release)
        if release == "broken":
            _truncate_llm(folder, "llm/gemma-270m")
        versions[release] = store.add(folder, label=release, move=True).id
    store.activate(versions["active"])
    recordings = work / "recordings"
    recordings.mkdir()
    for relative in RECORDINGS:
        shutil.copy(data_dir / relative, recordings / Path(relative).name)
    lines: dict[str, object] = {Path(k).name: v for k, v in RECORDINGS.items()}
    # A question whose answer must hold a fact, found with the site's facts tool.
    lines["google_audio.wav"] = {"text": RECORDINGS[QUESTION], "facts": ["1883"], "tool": "site_facts"}
    (recordings / "transcripts.json").write_text(json.dumps(lines), encoding="utf-8")
    facts = work / "facts.md"
    facts.write_text(FACTS, encoding="utf-8")
    settings = override(
        load_settings(None),
        # Speed is measured by the benchmark (docs/model-updates.md), not asserted on this shared machine:
        # the latency gates are opened wide here, the others are as shipped.
        bundle={"dir": str(store.root), "canary_max_latency_ratio": 10.0},
        llm={"model": "gemma-270m", "context_tokens": 512, "max_reply_tokens": 16},
        agent={
            "tools": [
                {"name": "site_facts", "kind": "facts", "file": str(facts), "description": "the site's facts"}
            ]
        },
    )
    return settings, recordings, versions


def test_a_candidate_like_the_active_bundle_passes_with_its_figures_side_by_side(site) -> None:
    settings, recordings, versions = site
    evaluation = evaluate(settings, versions["candidate"], set_dir=recordings)
    assert evaluation.passed, evaluation.report()
    active, candidate = evaluation.figures["active"], evaluation.figures["candidate"]
    assert active.loads and candidate.loads and not evaluation.synthetic_audio and evaluation.recordings == 3
    assert (
        candidate.wer is not None and candidate.wer < 0.3 and candidate.wer == active.wer
    )  # the same graphs
    assert candidate.turn_ms_p95 and candidate.peak_rss_mb and candidate.peak_rss_mb > 100
    # The question with a fact and a tool expected was answered as in service, by both alike.
    assert active.answer_checks == candidate.answer_checks == 2
    assert active.answer_accuracy is not None and candidate.answer_accuracy == active.answer_accuracy
    report = evaluation.report()
    assert "turn share p95" in report and "PASSED" in report and "recorded at the site" in report
    stored = read_evaluation(BundleStore(settings.bundle.dir).get(versions["candidate"]))
    assert stored is not None and stored.passed and stored.figures["candidate"].wer == candidate.wer


def test_a_candidate_that_cannot_load_is_refused_and_activated_only_when_forced(
    site, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings, recordings, versions = site
    evaluation = evaluate(settings, versions["broken"], set_dir=recordings)
    assert not evaluation.passed and "it does not load" in evaluation.failures[0]
    assert evaluation.figures["active"].loads and not evaluation.figures["candidate"].loads
    config = tmp_path / "site.toml"
    config.write_text(
        f'[bundle]\ndir = "{settings.bundle.dir}"\n[llm]\nmodel = "gemma-270m"\ncontext_tokens = 512\n'
        "max_reply_tokens = 16\n",
        encoding="utf-8",
    )
    store = BundleStore(settings.bundle.dir)
    assert main(["bundle", "activate", versions["broken"], "--config", str(config)]) == 1
    refusal = capsys.readouterr().err
    assert "failed its evaluation" in refusal and "it does not load" in refusal and "--force" in refusal
    assert store.state().active == versions["active"]
    assert main(["bundle", "activate", versions["broken"], "--force", "--config", str(config)]) == 0
    assert store.state().active == versions["broken"]
    assert main(["bundle", "rollback", "--config", str(config)]) == 0
    assert store.state().active == versions["active"]


def test_without_recordings_the_sites_facts_are_asked_and_the_report_says_the_audio_is_synthetic(
    site,
) -> None:
    settings, _recordings, versions = site
    evaluation = evaluate(settings, versions["candidate"])
    assert evaluation.synthetic_audio and evaluation.recordings == 2  # one question per fact
    assert evaluation.figures["candidate"].answer_checks == 2  # a figure each (the facts are in the prompt)
    assert "synthetic" in evaluation.report() and "answers right" in evaluation.report()
    # The voice's questions are heard: a bound, not the 0.08 seen on one machine (13 words, each 0.077;
    # the int8 kernels of another processor heard 4 wrong on the same audio, "canteen" the hardest).
    active, candidate = evaluation.figures["active"], evaluation.figures["candidate"]
    assert active.wer is not None and active.wer < 0.5 and candidate.wer == active.wer


def test_the_gates_name_each_regression_with_its_figures() -> None:
    from appliance.daemon.canary import Figures, judge

    settings = load_settings(None)
    active = Figures(True, wer=0.114, turn_ms_p50=1400, turn_ms_p95=1900, asr_ms_p50=210,
                     first_clause_ms_p50=1068, tts_first_audio_ms_p50=116, peak_rss_mb=2236)  # fmt: skip
    same = Figures(True, wer=0.114, turn_ms_p50=1420, turn_ms_p95=1850, asr_ms_p50=215,
                   first_clause_ms_p50=1050, tts_first_audio_ms_p50=150, peak_rss_mb=2300)  # fmt: skip
    assert judge(settings, active, same) == []  # a short stage within its 50 ms of slack
    slower_whisper = Figures(True, wer=0.144, turn_ms_p50=1420, turn_ms_p95=1853, asr_ms_p50=268,
                             first_clause_ms_p50=1053, tts_first_audio_ms_p50=109, peak_rss_mb=3500)  # fmt: skip
    failures = judge(settings, active, slower_whisper)
    assert [f.split(" ")[0] for f in failures] == ["WER", "speech", "peak"], failures
    assert "14.4% against 11.4%" in failures[0] and "268 ms against 210 ms" in failures[1]
    assert judge(settings, active, Figures(False, error="truncated")) == ["it does not load: truncated"]
    fewer_facts = Figures(**{**vars(same), "answer_checks": 10, "answer_accuracy": 0.6})
    told = Figures(**{**vars(active), "answer_checks": 10, "answer_accuracy": 0.8})
    (failure,) = judge(settings, told, fewer_facts)
    assert failure.startswith("answers right 60% against 80% of 10 expected facts and tool calls")
    inventing = Figures(**{**vars(same), "invented_answers": 1})
    (failure,) = judge(settings, active, inventing)  # right figures elsewhere do not make up for one
    assert failure.startswith("1 of its answers stated a figure that no source gave, against 0")
    assert judge(settings, inventing, inventing) == []  # no worse than the model in service


def test_without_a_set_the_questions_come_from_the_sites_facts(site) -> None:
    from appliance.daemon.canary import TYPICAL_QUESTIONS, site_questions

    settings, _recordings, _versions = site
    assert site_questions(settings) == [
        {"text": "Can you tell me about brooklyn bridge?", "facts": ["1883"]},
        {"text": "Can you tell me about canteen?", "facts": ["7:30"]},
    ]
    no_facts = override(settings, agent={"tools": []})
    assert [q["text"] for q in site_questions(no_facts)] == list(TYPICAL_QUESTIONS)


def test_a_set_line_of_the_wrong_shape_is_named_with_the_fix(tmp_path: Path) -> None:
    from appliance.daemon.canary import evaluation_set
    from engines.errors import BundleError

    (tmp_path / "a.wav").write_bytes(b"")
    (tmp_path / "transcripts.json").write_text(json.dumps({"a.wav": {"text": "hi", "facts": "7 am"}}))
    with pytest.raises(BundleError) as caught:
        evaluation_set(load_settings(None), None, tmp_path, tmp_path)  # type: ignore[arg-type]
    assert "the line of a.wav" in str(caught.value) and '"facts": ["7 am"]' in str(caught.value.fix)
