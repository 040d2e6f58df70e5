"""The canary: a candidate engine bundle measured against the active one before it serves anyone
(``appliance bundle evaluate VERSION``).

Both run the site's evaluation set, each in a child process of its own (``appliance.daemon.canary_worker``),
one after the other in one run: whether the engines load, the transcripts' word error rate, the
engines' share of a turn (speech recognition + the reply's first clause + its first audio) p50/p95, and
the process's peak memory. The candidate passes when it loads, its WER is at most
``bundle.canary_max_wer_increase`` above the active one's, its p95 turn share (or under
``trace.budget_ms``) and each stage's p50 within ``bundle.canary_max_latency_ratio`` of the active
one's, and its memory within ``bundle.canary_max_memory_ratio``. The verdict and the figures are kept beside the version
(``evaluation.json``), where ``appliance bundle activate`` reads them.

The evaluation set is a folder a technician fills at the site: recordings and ``transcripts.json``
(``{"file.wav": "what is said"}``, or ``{"file.wav": {"text": ..., "facts": [...], "tool": ...}}`` for a
question whose answer must hold those facts, through that tool). Without one, questions about the site's
own facts (or typical questions) are spoken with the active bundle's voice, and the report says the
audio was synthetic.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from appliance.config import Settings, override
from engines.bundle_store import EVALUATION, BundleStore, BundleVersion
from engines.errors import BundleError
from engines.files import atomic_write

TRANSCRIPTS = "transcripts.json"
WORKER_TIMEOUT_S = 1800
STAGE_SLACK_MS = 50.0
TYPICAL_QUESTIONS = (
    "What time does the canteen open?",
    "Where is the visitor car park?",
    "How do I get to the main reception?",
    "Who do I call when a machine stops?",
    "Is line three running today?",
    "What is the wifi password for guests?",
    "Where can I find the first aid kit?",
    "When is the next shift change?",
)


@dataclass(frozen=True)
class Figures:
    loads: bool
    error: str = ""
    wer: float | None = None
    turn_ms_p50: float | None = None
    turn_ms_p95: float | None = None
    asr_ms_p50: float | None = None
    first_clause_ms_p50: float | None = None
    tts_first_audio_ms_p50: float | None = None
    peak_rss_mb: float | None = None
    load_s: float | None = None
    answer_checks: int = 0  # expected facts and tool calls in the set
    answer_accuracy: float | None = None  # ... the share of them the answers had
    invented_answers: int = 0  # answers that tried to state a figure no source gave (agent.grounding)


@dataclass(frozen=True)
class Evaluation:
    candidate: str
    active: str
    passed: bool
    failures: list[str]
    synthetic_audio: bool
    recordings: int
    figures: dict[str, Figures] = field(default_factory=dict)  # "active", "candidate"

    def report(self) -> str:
        audio = "synthetic (the active bundle's voice)" if self.synthetic_audio else "recorded at the site"
        lines = [
            f"evaluation of {self.candidate} against the active {self.active}: {self.recordings} recordings, {audio}"
        ]
        rows = (
            ("loads", "loads", ""),
            ("WER", "wer", "share"),
            ("turn share p50", "turn_ms_p50", " ms"),
            ("turn share p95", "turn_ms_p95", " ms"),
            ("ASR p50", "asr_ms_p50", " ms"),
            ("first clause p50", "first_clause_ms_p50", " ms"),
            ("first audio p50", "tts_first_audio_ms_p50", " ms"),
            ("answers right", "answer_accuracy", "share"),
            ("answers inventing a figure", "invented_answers", ""),
            ("peak memory", "peak_rss_mb", " MB"),
            ("load time", "load_s", " s"),
        )
        lines.append(f"  {'':<18}{'active':>12}{'candidate':>12}")
        for title, key, unit in rows:
            cells = [_cell(getattr(self.figures[side], key), unit) for side in ("active", "candidate")]
            lines.append(f"  {title:<18}{cells[0]:>12}{cells[1]:>12}")
        if self.failures:
            lines += ["REFUSED:", *(f"  - {f}" for f in self.failures)]
        else:
            lines.append("PASSED: the candidate may be activated (appliance bundle activate)")
        return "\n".join(lines)


def _cell(value: object, unit: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.1%}" if unit == "share" else f"{value:.0f}{unit}"
    return f"{value}{unit}"


def evaluate(
    settings: Settings, version: str, *, set_dir: Path | None = None, model: str | None = None
) -> Evaluation:
    """The candidate ``version`` against the active one, kept as ``evaluation.json`` in its folder;
    with ``model``, the candidate answers with that language model (``llm.model``) of its own."""
    store = BundleStore(settings.bundle.dir)
    candidate, active = store.get(version), store.active_version()
    if candidate.id == active.id:
        raise BundleError(f"version {candidate.id} is the active one", fix="evaluate another version")
    sides = {"active": settings, "candidate": override(settings, llm={"model": model}) if model else settings}
    with tempfile.TemporaryDirectory(prefix="canary-") as scratch:
        items, synthetic = evaluation_set(settings, active, set_dir, Path(scratch))
        set_file = Path(scratch) / "set.json"
        set_file.write_text(json.dumps(items), encoding="utf-8")
        measured = {}
        for side, v in (("active", active), ("candidate", candidate)):
            settings_file = Path(scratch) / f"settings-{side}.json"
            settings_file.write_text(sides[side].model_dump_json(), encoding="utf-8")
            measured[side] = summarize(run_worker(v, set_file, settings_file))
    failures = judge(settings, measured["active"], measured["candidate"])
    evaluation = Evaluation(candidate.id, active.id, not failures, failures, synthetic, len(items), measured)
    atomic_write(candidate.path / EVALUATION, json.dumps(asdict(evaluation), indent=2) + "\n")
    return evaluation


def read_evaluation(version: BundleVersion) -> Evaluation | None:
    try:
        data = json.loads((version.path / EVALUATION).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    figures = {side: Figures(**values) for side, values in data.pop("figures", {}).items()}
    return Evaluation(**data, figures=figures)


def evaluation_set(
    settings: Settings, active: BundleVersion, set_dir: Path | None, scratch: Path
) -> tuple[list[dict[str, Any]], bool]:
    """(recordings with what they say, synthetic?): the site's folder, or typical questions spoken."""
    if set_dir is not None:
        try:
            transcripts = json.loads((set_dir / TRANSCRIPTS).read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise BundleError(
                f"the evaluation set {set_dir} has no readable {TRANSCRIPTS}: {err}",
                fix=f'put the recordings there with {TRANSCRIPTS}: {{"question-1.wav": "what is said"}}',
            ) from err
        missing = [name for name in transcripts if not (set_dir / name).is_file()]
        if missing or not transcripts:
            raise BundleError(
                f"the evaluation set {set_dir} lists recordings it does not hold: {', '.join(missing) or 'none listed'}",
                fix=f"copy the recordings beside {TRANSCRIPTS}, or remove their lines",
            )
        return [_set_item(set_dir, name, entry) for name, entry in transcripts.items()], False
    return _spoken_questions(settings, active, scratch), True


def _set_item(set_dir: Path, name: str, entry: object) -> dict[str, Any]:
    """One line of transcripts.json: ``"what is said"``, or ``{"text": ..., "facts": [...], "tool": ...}``."""
    if isinstance(entry, str):
        return {"audio": str(set_dir / name), "text": entry}
    facts = entry.get("facts", []) if isinstance(entry, dict) else None
    if (
        not isinstance(entry, dict)
        or not isinstance(entry.get("text"), str)
        or not isinstance(facts, list)
        or not all(isinstance(f, str) for f in facts)
        or not isinstance(entry.get("tool", ""), str)
    ):
        raise BundleError(
            f"{set_dir / TRANSCRIPTS}: the line of {name} is neither what is said nor "
            '{"text": ..., "facts": [...], "tool": ...}',
            fix=f'write it as "{name}": "what is said", or "{name}": {{"text": "what is said", '
            '"facts": ["7 am"], "tool": "site_facts"}',
        )
    return {
        "audio": str(set_dir / name),
        "text": entry["text"],
        "facts": facts,
        "tool": entry.get("tool", ""),
    }


def site_questions(settings: Settings) -> list[dict[str, Any]]:
    """Questions about the site's own facts (the first facts tool's file), each expecting that tool to
    be called and, where the fact has a figure or a time, that figure in the answer; the typical
    questions when the site has no facts."""
    from appliance.tools.facts import FactsFileError, read_facts

    tool = next((t for t in settings.agent.tools if t.kind == "facts" and t.file is not None), None)
    facts = []
    if tool is not None and tool.file is not None:
        try:
            facts = read_facts(tool.file)[: len(TYPICAL_QUESTIONS)]
        except FactsFileError:
            facts = []
    if tool is None or not facts:
        return [{"text": question} for question in TYPICAL_QUESTIONS]
    questions = []
    for fact in facts:
        title = fact.title.strip()
        text = title if title.endswith("?") else f"Can you tell me about {title.rstrip('.').lower()}?"
        figures = [w.strip(".,;") for w in fact.text.split() if any(c.isdigit() for c in w)][:1]
        questions.append({"text": text, "facts": figures})  # the facts are in the prompt: no tool call
    return questions


def _spoken_questions(settings: Settings, active: BundleVersion, scratch: Path) -> list[dict[str, Any]]:
    import soundfile

    from appliance.engine_set import tts_engine
    from engines.audio import SAMPLE_RATE_HZ
    from engines.bundle import Bundle

    tts = tts_engine(settings, Bundle.open(active.path, verify=False))
    tts.load()
    items = []
    try:
        for index, question in enumerate(site_questions(settings)):
            audio = np.concatenate(list(tts.synthesize(question["text"], sample_rate_hz=SAMPLE_RATE_HZ)))
            pause = np.zeros(SAMPLE_RATE_HZ // 2, np.float32)
            path = scratch / f"question-{index + 1}.wav"
            soundfile.write(path, np.concatenate([pause, audio, pause]), SAMPLE_RATE_HZ)
            items.append({**question, "audio": str(path)})
    finally:
        tts.close()
    return items


def run_worker(version: BundleVersion, set_file: Path, settings_file: Path) -> dict[str, Any]:
    command = [
        sys.executable,
        "-m",
        "appliance.daemon.canary_worker",
        str(version.path),
        str(set_file),
        str(settings_file),
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"loads": False, "error": f"no result within {WORKER_TIMEOUT_S} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"loads": False, "error": f"the measuring process ended with status {done.returncode}: {tail}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def summarize(result: dict[str, Any]) -> Figures:
    from engines.asr.text import word_error_rate

    if not result.get("loads"):
        return Figures(loads=False, error=str(result.get("error", "")), peak_rss_mb=result.get("peak_rss_mb"))
    items = result["items"]

    def p(key: str, q: float) -> float:
        return round(float(np.percentile([i[key] for i in items], q)), 1)

    checks = sum(i.get("facts_expected", 0) + int(i.get("tool_expected", False)) for i in items)
    right = sum(i.get("facts_found", 0) + int(i.get("tool_called", False)) for i in items)
    return Figures(
        loads=True,
        answer_checks=checks,
        answer_accuracy=round(right / checks, 4) if checks else None,
        invented_answers=sum(bool(i.get("invented")) for i in items),
        wer=round(word_error_rate([i["reference"] for i in items], [i["transcript"] for i in items]), 4),
        turn_ms_p50=p("turn_ms", 50),
        turn_ms_p95=p("turn_ms", 95),
        asr_ms_p50=p("asr_ms", 50),
        first_clause_ms_p50=p("first_clause_ms", 50),
        tts_first_audio_ms_p50=p("tts_first_audio_ms", 50),
        peak_rss_mb=result.get("peak_rss_mb"),
        load_s=result.get("load_s"),
    )


def judge(settings: Settings, active: Figures, candidate: Figures) -> list[str]:
    """The gates the candidate fails, each with its figures."""
    gates = settings.bundle
    if not candidate.loads:
        return [f"it does not load: {candidate.error}"]
    failures = []
    wer_limit = None if active.wer is None else active.wer + gates.canary_max_wer_increase
    if wer_limit is not None and candidate.wer is not None and candidate.wer > wer_limit:
        failures.append(
            f"WER {candidate.wer:.1%} against {active.wer:.1%} (bundle.canary_max_wer_increase = "
            f"{gates.canary_max_wer_increase:.0%} points)"
        )
    if active.turn_ms_p95 and candidate.turn_ms_p95:
        allowed = max(active.turn_ms_p95 * gates.canary_max_latency_ratio, float(settings.trace.budget_ms))
        if candidate.turn_ms_p95 > allowed:
            failures.append(
                f"turn share p95 {candidate.turn_ms_p95:.0f} ms against {active.turn_ms_p95:.0f} ms "
                f"(at most x{gates.canary_max_latency_ratio} or trace.budget_ms = {settings.trace.budget_ms})"
            )
    for title, key in (
        ("speech recognition", "asr_ms_p50"),
        ("the first clause", "first_clause_ms_p50"),
        ("the first audio", "tts_first_audio_ms_p50"),
    ):
        before, after = getattr(active, key), getattr(candidate, key)
        # A stage that got slower fails on its own (the turn share hides a slower Whisper behind the
        # LLM); STAGE_SLACK_MS keeps a few milliseconds of noise on a short stage from failing it.
        if before and after and after > max(before * gates.canary_max_latency_ratio, before + STAGE_SLACK_MS):
            failures.append(
                f"{title} p50 {after:.0f} ms against {before:.0f} ms "
                f"(bundle.canary_max_latency_ratio = {gates.canary_max_latency_ratio})"
            )
    before, after = active.answer_accuracy, candidate.answer_accuracy
    if before is not None and after is not None and after < before - gates.canary_max_answer_drop:
        failures.append(
            f"answers right {after:.0%} against {before:.0%} of {candidate.answer_checks} expected facts "
            f"and tool calls (bundle.canary_max_answer_drop = {gates.canary_max_answer_drop:.0%} points)"
        )
    if candidate.invented_answers > active.invented_answers:
        # Against the active bundle's count: a site whose model already does so can still update.
        failures.append(
            f"{candidate.invented_answers} of its answers stated a figure that no source gave, against "
            f"{active.invented_answers} (the grounding check kept it from being spoken; in service the "
            "person would hear a decline)"
        )
    memory_limit = (active.peak_rss_mb or 0.0) * gates.canary_max_memory_ratio
    if memory_limit and candidate.peak_rss_mb and candidate.peak_rss_mb > memory_limit:
        failures.append(
            f"peak memory {candidate.peak_rss_mb:.0f} MB against {active.peak_rss_mb:.0f} MB "
            f"(bundle.canary_max_memory_ratio = {gates.canary_max_memory_ratio})"
        )
    return failures
