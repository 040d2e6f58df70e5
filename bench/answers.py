"""Answers from a site's facts, through the real answer path: the repo's site
(``bench/sites/riverside/facts.md``, 40 questions, which the product was tuned on) or generated sites it
never saw (``bench/site_generator.py``: 7 sites of 13 sections with sibling items, 319 questions, about
half about a listed item and half about an unlisted sibling or a thing the facts do not give).

    .venv/bin/python -m bench answers [--sites generated|riverside] [--configs select,paraphrase,select_call]
                                      [--typed] [--limit N] [--model qwen-1.5b]

Configurations side by side in one run, on the same questions:
- ``select``: the shipped settings: the model chooses the facts' numbered sentences, the appliance says
  them as written after its checks;
- ``paraphrase``: the rule before (``agent.answers = "paraphrase"``): the model's own words, checked
  figure by figure by the grounding check;
- ``unchecked``: paraphrase without the grounding check; ``as_heard``: select without the site's words by
  sound; ``nouns``: select with Whisper told to expect the facts' own words (``asr.vocabulary``) instead
  of the site's words put back by sound; ``question``: each question given only its matching sections;
- ``*_call`` (``select_call``, ``paraphrase_call``, ``nouns_call``): the same, the voice through the 8 kHz call path.

Each question is spoken by Piper into the real session (VAD, Whisper, the LLM, Piper) in real time, or
with ``--typed`` given as text to the same answer path (no ASR: the answer logic alone, quicker).

Per configuration: answered right (an expected figure or word in what was played, not declined),
declined (of the unanswerable), figures spoken of the wrong item (misattributed: a figure of the facts
played for an unanswerable question, or in place of the right one), invented (a figure in no source),
fragments played before a decline, internal text played, first audio p50/p95 (from the end of speech;
typed: from the question). Results: ~/.cache/appliance/bench-results/answers-<time>.json. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from appliance.config import Settings, load_settings, override
from appliance.engine_set import build_engines, load_engines, open_bundle, session_config
from appliance.grounding import Sources, figures
from appliance.pipeline.typed_turn import answer_typed
from appliance.tools.facts import read_facts
from bench.machine import write_result
from bench.sip import _percentiles
from bench.site import one_turn
from bench.site_generator import generate_sites
from engines.audio import resample

log = logging.getLogger("bench.answers")

FACTS = Path(__file__).resolve().parent / "sites" / "riverside" / "facts.md"
# Text the product gives the model that no reply may carry.
INTERNAL = (
    "data from",
    "now answer the person",
    "once your reply has been played",
    "tool_call",
    "site facts",
)


@dataclass(frozen=True)
class Question:
    text: str
    expect: tuple[str, ...] = ()  # figures or words, one of which the answer must hold; () = unanswerable
    kind: str = "listed"


@dataclass(frozen=True)
class SiteSet:
    name: str
    facts: Path
    questions: tuple[Question, ...]


QUESTIONS = (
    Question("When does the canteen open?", ("7:30", "half past seven")),
    Question("What time does the canteen close?", ("14:00", "2 pm")),
    Question("How much is a hot meal in the canteen?", ("4.50",)),
    Question("Where is the canteen?", ("building b", "first floor")),
    Question("What is the extension of the reception desk?", ("2000",)),
    Question("When is reception staffed?", ("7:00", "18:00")),
    Question("How long is a visitor pass valid?", ("3 days", "three days")),
    Question("How high may pallets be stacked in hall 2?", ("2 high", "two high", "2 pallets")),
    Question("How wide must the aisles be?", ("1.5 metres",)),
    Question("Which room is the first aid room?", ("114",)),
    Question("What number do I call in an emergency?", ("5555",)),
    Question("Where is the fire assembly point?", ("car park d", "north gate")),
    Question("What is the extension of the IT help desk?", ("4321",)),
    Question("When is the IT help desk open?", ("8:00", "17:00")),
    Question("What torque do the M10 flange bolts on press line 2 need?", ("45",)),
    Question("What torque are the M6 cover screws tightened to?", ("9 newton",)),
    Question("What is the speed limit for forklifts in the halls?", ("10 kilometres",)),
    Question("Where do visitors park?", ("car park b",)),
    Question("How many visitor parking spaces are there?", ("40",)),
    Question("When does the morning shift start?", ("6:00", "6 am")),
    Question("When does the afternoon shift end?", ("22:00", "10 pm")),
    Question("Is there a night shift?", ("no night shift", "no,", "there is no")),
    Question("Where are the lockers?", ("basement",)),
    Question("How much does it cost to replace a lost locker key?", ("15",)),
    Question("How many people does meeting room Oak seat?", ("12",)),
    Question("Which room is meeting room Elm?", ("305",)),
    Question("How many people fit in meeting room Elm?", ("6 people", "six people", "seats 6", "seats six")),
    Question("What do fire wardens wear?", ("yellow",)),
    Question("Where do staff park?", ("car park a",)),
    Question("Where do visitors sign in?", ("reception",)),
    Question("When is the next fire drill?"),
    Question("How much does a coffee cost in the canteen?"),
    Question("What is the wifi password?"),
    Question("How many people work at this site?"),
    Question("What is the maximum weight a forklift may lift?"),
    Question("When does the canteen open on Saturdays?"),
    Question("What is the extension of the security office?"),
    Question("How long is the lunch break?"),
    Question("How many lockers are there?"),
    Question("What torque do the M8 bolts on line 5 need?"),
)
CONFIGS = (
    "select",
    "paraphrase",
    "unchecked",
    "as_heard",
    "nouns",
    "question",
    "select_call",
    "paraphrase_call",
    "nouns_call",
)


def site_settings(
    model: str, config: str, facts: Path = FACTS, site_name: str = "the Riverside plant"
) -> Settings:
    base = config.removesuffix("_call")
    agent: dict[str, Any] = {
        "site_name": site_name,
        "tools": [
            {"name": "site_facts", "kind": "facts", "description": "the site's facts", "file": str(facts)},
            {"name": "device_status", "kind": "device", "description": "the current time and today's date"},
        ],
        "grounding": base != "unchecked",
        "site_words_by_sound": base not in ("as_heard", "nouns"),
        "answers": "paraphrase" if base in ("paraphrase", "unchecked") else "select",
    }
    if base == "question":
        agent["facts_prompt_tokens"] = 0
    # As the site's technician would: the facts' titles are the words Whisper is told to expect;
    # ``nouns``: Whisper biased towards the facts' own words instead of the matcher putting them back.
    vocabulary = [fact.title for fact in read_facts(facts)] if base != "nouns" else _facts_words(facts)
    return override(load_settings(None), agent=agent, llm={"model": model}, asr={"vocabulary": vocabulary})


def _facts_words(facts: Path, limit: int = 60) -> list[str]:
    """The facts' distinct words that name things (capitalised, codes, or not a common word), in order."""
    from appliance.tools.site_words import _FUNCTION_WORDS

    seen: dict[str, str] = {}
    for fact in read_facts(facts):
        for word in re.findall(r"[A-Za-z][A-Za-z0-9]+", f"{fact.title} {fact.text}"):
            if word.lower() not in _FUNCTION_WORDS and len(word) > 2:
                seen.setdefault(word.lower(), word)
    return list(seen.values())[:limit]


def site_sets(which: str, folder: Path) -> list[SiteSet]:
    """The repo's site, or the generated ones written into ``folder``."""
    if which == "riverside":
        return [SiteSet("the Riverside plant", FACTS, QUESTIONS)]
    sets = []
    for index, site in enumerate(generate_sites()):
        path = folder / f"site-{index + 1}.md"
        path.write_text(site.facts, encoding="utf-8")
        questions = tuple(Question(q.text, q.expect, q.kind) for q in site.questions)
        sets.append(SiteSet(site.name, path, questions))
    return sets


def _spoken(voice: Any, text: str, *, call: bool) -> np.ndarray:
    audio_22k = np.concatenate([chunk for chunk in voice.synthesize(text, sample_rate_hz=22050)])
    audio = resample(audio_22k, 22050, 16000).astype(np.float32)
    if call:  # the caller's voice as the phone line carries it
        audio = resample(resample(audio, 16000, 8000), 8000, 16000).astype(np.float32)
    level = max(float(np.abs(audio).max()), 1e-6)
    return np.concatenate(
        [np.zeros(8000, np.float32), audio / level * 0.5, np.zeros(24000, np.float32)]
    ).astype(np.float32)


def _all_sources(question: str, facts: Path) -> Sources:
    sources = Sources()
    for fact in read_facts(facts):
        sources.add(fact.text, title=fact.title)
    sources.add(question)
    return sources


def _invented(text: str, sources: Sources) -> list[str]:
    return [figure.text for figure in figures(text) if not sources.grounds(figure)]


def _holds(text: str, expected: str) -> bool:
    lowered = text.lower()
    if expected.lower() in lowered:
        return True
    wanted = figures(expected)
    if not wanted:
        return False
    said = figures(text)
    return all(any(w.values & s.values for s in said) for w in wanted)


async def _ask(
    engines: Any, settings: Settings, question: Question, audio: np.ndarray | None, facts: Path
) -> dict[str, Any]:
    if audio is None:
        trace = await answer_typed(engines, session_config(settings).turn, question.text)
        started = trace.asr_done
    else:
        trace = await one_turn(engines, settings, audio)
        started = trace.speech_end if trace is not None else None
    if trace is None:
        return {"question": question.text, "heard": "", "error": "no turn"}
    played, reply = trace.played_reply, trace.reply
    sources = _all_sources(trace.transcript, facts)
    answerable = bool(question.expect)
    right = answerable and not trace.declined and any(_holds(played, e) for e in question.expect)
    stated = [] if trace.declined else _values(played, question.text)
    decline_at = min((played.find(s) for s in _DECLINES if played.find(s) >= 0), default=-1)
    # A decline names the person's item and the facts' siblings: not figures stated as values.
    invented = _invented(played[:decline_at] if decline_at >= 0 else played, sources)
    # A figure of the facts said for a question they do not answer, or instead of the right one.
    misattributed = [v for v in stated if v not in invented] if not right else []
    return {
        "question": question.text,
        "kind": question.kind,
        "heard": trace.transcript,
        "heard_as": trace.heard_as,
        "answerable": answerable,
        "reply": reply,
        "played": played,
        "chosen": trace.chosen,
        "answer_check": trace.answer_check,
        "tool_calls": trace.tool_calls,
        "withheld": trace.withheld,
        "declined": trace.declined,
        "right": right,
        "short": len(played.split()) <= 20,
        "declined_cleanly": (not answerable) and trace.declined and not misattributed,
        "misattributed": misattributed,
        "invented_before": _invented(reply, sources),
        "invented_played": invented,
        "fragment_before_decline": trace.declined and decline_at > 0 and bool(played[:decline_at].strip()),
        "internal_played": [word for word in INTERNAL if word in played.lower()],
        "preamble": trace.preamble_audio,
        "first_audio_ms": _ms(started, trace.playback_start),
    }


# The starts of the sentences the product declines with (agent.not_known_reply, agent.unknown_item).
_DECLINES = ("Sorry, I don't have", "I have nothing on")


def _values(text: str, question: str) -> list[str]:
    """The figures ``text`` states as values: not the person's own (M8, hall 3), not codes."""
    asked = {v for f in figures(question) for v in f.values}
    return [
        f.text for f in figures(text) if not (f.values & asked) and not re.fullmatch(r"[A-Za-z]+\d+", f.text)
    ]


def _ms(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else round((end - start) * 1000.0, 1)


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    answerable = [r for r in rows if r.get("answerable")]
    other = [r for r in rows if "answerable" in r and not r["answerable"]]
    latency = [r["first_audio_ms"] / 1000.0 for r in rows if r.get("first_audio_ms")]
    replies = [r for r in rows if "reply" in r]
    return {
        "answered_right": f"{sum(r['right'] for r in answerable)}/{len(answerable)}",
        "declined": f"{sum(r['declined_cleanly'] for r in other)}/{len(other)}",
        "misattributed": sum(bool(r["misattributed"]) for r in replies),
        "invented_played": sum(bool(r["invented_played"]) for r in replies),
        "invented_model": sum(bool(r["invented_before"]) for r in replies),
        "fragments_before_decline": sum(r["fragment_before_decline"] for r in replies),
        "clauses_withheld": sum(len(r["withheld"]) for r in replies),
        "internal_played": sum(bool(r["internal_played"]) for r in replies),
        "tool_calls": sum(bool(r["tool_calls"]) for r in replies),
        "not_heard": sum(1 for r in rows if r.get("error")),
        "first_audio_ms": _percentiles(latency),
    }


async def _run_config(args: argparse.Namespace, config: str, sets: list[SiteSet]) -> dict[str, Any]:
    rows = []
    for site in sets:
        settings = site_settings(args.model, config, site.facts, site.name)
        engines = build_engines(settings, open_bundle(settings))
        await load_engines(engines)
        try:
            step = max(1, len(site.questions) // args.limit) if args.limit else 1
            for question in site.questions[::step][: args.limit or None]:
                audio = (
                    None if args.typed else _spoken(engines.tts, question.text, call=config.endswith("_call"))
                )
                rows.append(await _ask(engines, settings, question, audio, site.facts))
                row = rows[-1]
                good = row.get("right") or row.get("declined_cleanly")
                print(
                    f"  {config:<10} {'ok ' if good else 'BAD'} {question.text[:46]:<46} heard "
                    f"{row.get('heard', '')[:40]!r:<42} {row.get('chosen', '')!s:<5} -> "
                    f"{row.get('played', row.get('error', ''))[:80]!r}",
                    flush=True,
                )
        finally:
            await engines.close()
    return {"summary": _summary(rows), "questions": rows}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-sites-") as folder:  # drawn again from the seed
        sets = site_sets(args.sites, Path(folder))
        results: dict[str, Any] = {}
        for config in args.configs.split(","):
            results[config] = await _run_config(args, config, sets)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="qwen-1.5b")
    parser.add_argument("--sites", choices=("generated", "riverside"), default="generated")
    parser.add_argument("--configs", default="select,paraphrase", help=f"some of {', '.join(CONFIGS)}")
    parser.add_argument("--typed", action="store_true", help="questions as text (no voice, no ASR)")
    parser.add_argument(
        "--limit", type=int, default=0, help="questions per site, evenly spread over it (0: all)"
    )
    args = parser.parse_args()
    unknown = set(args.configs.split(",")) - set(CONFIGS)
    if unknown:
        parser.error(f"unknown configuration {', '.join(sorted(unknown))}: use {', '.join(CONFIGS)}")
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    results = asyncio.run(main_async(args))
    write_result("answers", vars(args), {k: v["summary"] for k, v in results.items()} | {"runs": results})
    for config, result in results.items():
        s = result["summary"]
        p = s["first_audio_ms"]
        print(
            f"{config:<10} right {s['answered_right']}, declined {s['declined']}, misattributed "
            f"{s['misattributed']}, invented {s['invented_played']} (model {s['invented_model']}), fragments "
            f"before a decline {s['fragments_before_decline']}, withheld {s['clauses_withheld']}, internal "
            f"{s['internal_played']}, first audio p50 {p['p50']:.0f} p95 {p['p95']:.0f} ms (n={p['n']})"
        )


if __name__ == "__main__":
    main()
