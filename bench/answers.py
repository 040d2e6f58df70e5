"""Answers grounded in the site's facts, through the real pipeline: a site of 13 sections
(``bench/sites/riverside/facts.md``), 30 questions its facts answer and 10 they do not, each spoken by
Piper's voice into the real session (VAD, Whisper, Qwen, Piper), in real time.

    .venv/bin/python -m bench answers [--model qwen-1.5b] [--configs prompt,as_heard,unchecked,question,call]

Side by side in one run, on the same questions:
- ``prompt``: the facts in the system prompt and the grounding check (the shipped settings);
- ``as_heard``: the same with the transcript as Whisper wrote it (``agent.site_words_by_sound = false``:
  "meeting room L" is not read as "meeting room Elm");
- ``unchecked``: the same without the check (what the model says on its own);
- ``question``: the facts matching each question given with it (``agent.facts_prompt_tokens = 0``), checked;
- ``call``: as ``prompt``, the voice through the 8 kHz call path (band-limited to 8 kHz and back).

Per configuration: answered right (an expected figure or word in what was played, not declined),
short answers (at most 20 words), declined cleanly (unanswerable: declined, no figure played),
replies with a figure absent from the sources, before the check (the model's text) and after it
(what was played), internal text played, and the reply latency (end of speech to first audio) p50/p95.
Results: bench/results/answers-<time>.json. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from appliance.config import Settings, load_settings, override
from appliance.engine_set import build_engines, load_engines, open_bundle
from appliance.grounding import Sources, figures
from appliance.tools.facts import read_facts
from bench.machine import write_result
from bench.sip import _percentiles
from bench.site import one_turn
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
CONFIGS = ("prompt", "as_heard", "unchecked", "question", "call")


def site_settings(model: str, config: str) -> Settings:
    agent: dict[str, Any] = {
        "site_name": "the Riverside plant",
        "tools": [
            {
                "name": "site_facts",
                "kind": "facts",
                "description": "the site's facts",
                "file": str(FACTS),
            },
            {"name": "device_status", "kind": "device", "description": "the current time and today's date"},
        ],
        "grounding": config != "unchecked",
        "site_words_by_sound": config != "as_heard",
    }
    if config == "question":
        agent["facts_prompt_tokens"] = 0
    # As the site's technician would: the facts' titles are the words Whisper is told to expect.
    vocabulary = [fact.title for fact in read_facts(FACTS)]
    return override(load_settings(None), agent=agent, llm={"model": model}, asr={"vocabulary": vocabulary})


def _spoken(voice: Any, text: str, *, call: bool) -> np.ndarray:
    audio_22k = np.concatenate([chunk for chunk in voice.synthesize(text, sample_rate_hz=22050)])
    audio = resample(audio_22k, 22050, 16000).astype(np.float32)
    if call:  # the caller's voice as the phone line carries it
        audio = resample(resample(audio, 16000, 8000), 8000, 16000).astype(np.float32)
    level = max(float(np.abs(audio).max()), 1e-6)
    return np.concatenate(
        [np.zeros(8000, np.float32), audio / level * 0.5, np.zeros(24000, np.float32)]
    ).astype(np.float32)


def _all_sources(question: str) -> Sources:
    sources = Sources()
    for fact in read_facts(FACTS):
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


async def _ask(engines: Any, settings: Settings, question: Question, audio: np.ndarray) -> dict[str, Any]:
    trace = await one_turn(engines, settings, audio)
    if trace is None:
        return {"question": question.text, "heard": "", "error": "no turn"}
    played, reply = trace.played_reply, trace.reply
    sources = _all_sources(trace.transcript)
    answerable = bool(question.expect)
    right = answerable and not trace.declined and any(_holds(played, e) for e in question.expect)
    return {
        "question": question.text,
        "heard": trace.transcript,
        "heard_as": trace.heard_as,
        "answerable": answerable,
        "reply": reply,
        "played": played,
        "tool_calls": trace.tool_calls,
        "withheld": trace.withheld,
        "declined": trace.declined,
        "right": right,
        "short": len(played.split()) <= 20,
        "declined_cleanly": (not answerable) and trace.declined and not figures(played),
        "invented_before": _invented(reply, sources),
        "invented_played": _invented(played, sources),
        "internal_played": [word for word in INTERNAL if word in played.lower()],
        "preamble": trace.preamble_audio,
        "first_audio_ms": _ms(trace.speech_end, trace.playback_start),
    }


def _ms(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else round((end - start) * 1000.0, 1)


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    answerable = [r for r in rows if r.get("answerable")]
    other = [r for r in rows if "answerable" in r and not r["answerable"]]
    latency = [r["first_audio_ms"] / 1000.0 for r in rows if r.get("first_audio_ms")]
    return {
        "answered_right": f"{sum(r['right'] for r in answerable)}/{len(answerable)}",
        "right_and_short": f"{sum(r['right'] and r['short'] for r in answerable)}/{len(answerable)}",
        "declined_cleanly": f"{sum(r['declined_cleanly'] for r in other)}/{len(other)}",
        "replies_inventing_a_figure_model": sum(bool(r["invented_before"]) for r in rows if "reply" in r),
        "replies_inventing_a_figure_played": sum(bool(r["invented_played"]) for r in rows if "reply" in r),
        "clauses_withheld": sum(len(r["withheld"]) for r in rows if "withheld" in r),
        "internal_played": sum(bool(r["internal_played"]) for r in rows if "reply" in r),
        "tool_calls": sum(bool(r["tool_calls"]) for r in rows if "reply" in r),
        "preambles": sum(bool(r["preamble"]) for r in rows if "reply" in r),
        "not_heard": sum(1 for r in rows if r.get("error")),
        "first_audio_ms": _percentiles(latency),
    }


async def _run_config(model: str, config: str) -> dict[str, Any]:
    settings = site_settings(model, config)
    bundle = open_bundle(settings)
    engines = build_engines(settings, bundle)
    await load_engines(engines)
    try:
        rows = []
        for question in QUESTIONS:
            audio = _spoken(engines.tts, question.text, call=config == "call")
            rows.append(await _ask(engines, settings, question, audio))
            row = rows[-1]
            print(
                f"  {config:<9} {'ok ' if row.get('right') or row.get('declined_cleanly') else 'BAD'} "
                f"{question.text[:48]:<48} heard {row.get('heard', '')[:48]!r:<50} -> "
                f"{row.get('played', row.get('error', ''))[:90]!r}",
                flush=True,
            )
    finally:
        await engines.close()
    return {"summary": _summary(rows), "questions": rows}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for config in args.configs.split(","):
        results[config] = await _run_config(args.model, config)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="qwen-1.5b")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"some of {', '.join(CONFIGS)}")
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
            f"{config:<9} right {s['answered_right']} (short {s['right_and_short']}), declined "
            f"{s['declined_cleanly']}, inventing: model {s['replies_inventing_a_figure_model']} played "
            f"{s['replies_inventing_a_figure_played']}, withheld {s['clauses_withheld']}, internal "
            f"{s['internal_played']}, tool calls {s['tool_calls']}, preambles {s['preambles']}, "
            f"first audio p50 {p['p50']:.0f} p95 {p['p95']:.0f} ms (n={p['n']})"
        )


if __name__ == "__main__":
    main()
