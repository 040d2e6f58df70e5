"""appliance facts test FACTS [QUESTIONS.tsv] [--spoken]: each question answered through the same answer
path as the kiosk (the facts' numbered sentences, the model's choice, the product's checks), with the
sentence chosen or why it declined. A technician tries a facts file before the site relies on it.

QUESTIONS.tsv: one question a line, optionally a tab and what a right answer holds ("25" or "no night
shift"); a line with only a question and a tab and "-" must be declined. Without the file, questions
are read from standard input, one a line. ``--spoken``: Piper says each question and Whisper hears it,
as at the kiosk (the site's words by sound included)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.commands.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, add_config_option, settings_or_exit
from appliance.config import Settings

TAIL_SILENCE_S = 1.5


@dataclass(frozen=True)
class Asked:
    text: str
    expect: str | None = None  # None: not checked; "": must be declined; else a right answer holds it


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("facts", help="try a facts file: questions answered as the kiosk would")
    verbs = parser.add_subparsers(dest="verb", required=True)
    test = verbs.add_parser(
        "test", help="answer each question from FACTS, with the sentence chosen or why not"
    )
    test.add_argument("facts", type=Path, help="the facts file (Markdown or question-and-answer text)")
    test.add_argument("questions", type=Path, nargs="?", help="a .tsv of questions (default: standard input)")
    test.add_argument(
        "--spoken", action="store_true", help="through Piper and Whisper, as a person at the kiosk"
    )
    add_config_option(test)
    test.set_defaults(handler=handle)


def read_questions(path: Path | None) -> list[Asked]:
    """The questions of a .tsv (or standard input, one a line)."""
    lines = (
        path.read_text(encoding="utf-8").splitlines() if path is not None else sys.stdin.read().splitlines()
    )
    asked = []
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        question, _, expect = line.partition("\t")
        expect = expect.strip()
        asked.append(Asked(question.strip(), ("" if expect == "-" else expect) if expect else None))
    return asked


def handle(args: argparse.Namespace) -> int:
    settings = settings_or_exit(args)
    from appliance.config import ConfigError
    from appliance.tools.facts import FactsFileError, read_facts
    from engines.errors import EngineError

    try:
        read_facts(args.facts)
        asked = read_questions(args.questions)
    except (FactsFileError, OSError, UnicodeDecodeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    if not asked:
        print(
            "error: no questions (fix: give a .tsv of questions, or type them, one a line)", file=sys.stderr
        )
        return EXIT_USAGE
    try:
        rows = asyncio.run(_answer_all(_with_facts(settings, args.facts), asked, spoken=args.spoken))
    except (EngineError, ConfigError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    wrong = 0
    for question, row in zip(asked, rows, strict=True):
        print(_describe(question, row))
        wrong += row["verdict"] == "WRONG"
    checked = sum(q.expect is not None for q in asked)
    if checked:
        print(f"{checked - wrong} of {checked} as expected")
    return EXIT_OK if not wrong else EXIT_FAILED


def _with_facts(settings: Settings, facts: Path) -> Settings:
    """The site's settings with ``facts`` as its facts file (its other tools kept)."""
    from appliance.config import override

    others = [tool.model_dump() for tool in settings.agent.tools if tool.kind != "facts"]
    tool = {"name": "site_facts", "kind": "facts", "description": "the site's facts", "file": str(facts)}
    return override(settings, agent={"tools": [tool, *others]})


async def _answer_all(settings: Settings, asked: list[Asked], *, spoken: bool) -> list[dict[str, Any]]:
    from appliance.engine_set import build_engines, load_engines, open_bundle, session_config
    from appliance.pipeline.typed_turn import answer_typed

    engines = build_engines(settings, open_bundle(settings))
    await load_engines(engines)
    rows = []
    try:
        config = session_config(settings)
        for question in asked:
            if spoken:
                trace = await _spoken_turn(engines, config, question.text)
            else:
                trace = await answer_typed(engines, config.turn, question.text, session_id="facts-test")
            rows.append(_row(question, trace))
    finally:
        await engines.close()
    return rows


async def _spoken_turn(engines: Any, config: Any, text: str) -> Any:
    import numpy as np

    from appliance.audio.files import ArraySource, MemorySink
    from appliance.pipeline.oneshot import one_turn
    from engines.audio import resample

    voice = engines.tts
    audio = np.concatenate(list(voice.synthesize(text, sample_rate_hz=voice.sample_rate_hz)))
    audio = resample(audio, voice.sample_rate_hz, 16000).astype(np.float32)
    silence = np.zeros(int(16000 * TAIL_SILENCE_S), np.float32)
    source = ArraySource(np.concatenate([silence[:8000], audio, silence]), realtime=False)
    return await one_turn(
        engines, source, MemorySink(voice.sample_rate_hz), config=config, session_id="facts-test"
    )


def _row(question: Asked, trace: Any) -> dict[str, Any]:
    if trace is None:
        return {"said": "", "verdict": "WRONG" if question.expect is not None else "", "why": "nothing heard"}
    said = trace.played_reply or trace.reply
    verdict = ""
    if question.expect == "":
        verdict = "ok" if trace.declined else "WRONG"
    elif question.expect is not None:
        verdict = "ok" if question.expect.lower() in said.lower() and not trace.declined else "WRONG"
    return {
        "heard": trace.transcript,
        "heard_as": trace.heard_as,
        "said": said,
        "chosen": trace.chosen,
        "why": trace.answer_check,
        "declined": trace.declined,
        "withheld": trace.withheld,
        "verdict": verdict,
    }


def _describe(question: Asked, row: dict[str, Any]) -> str:
    lines = [f"Q: {question.text}"]
    if row.get("heard") and row["heard"] != question.text:
        lines.append(
            f"   heard: {row['heard']}" + (f" ({', '.join(row['heard_as'])})" if row.get("heard_as") else "")
        )
    lines.append(f"   said:  {row['said'] or '(nothing)'}")
    chosen = row.get("chosen")
    if chosen:
        lines.append(f"   chose: [{chosen[0]}]" + (f", then {row['why']}" if row.get("why") else ""))
    elif row.get("why"):
        lines.append(f"   why:   {row['why']}")
    for withheld in row.get("withheld", []):
        lines.append(f"   withheld: {withheld.get('clause', '')!r} ({withheld.get('why', '')})")
    if row["verdict"]:
        wanted = "a decline" if question.expect == "" else repr(question.expect)
        lines.append(f"   {row['verdict']} (expected {wanted})")
    return "\n".join(lines)
