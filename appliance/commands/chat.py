"""appliance chat TEXT: stream a reply from the configured LLM."""

from __future__ import annotations

import argparse
import json
import sys
import threading

from appliance.commands.common import (
    EXIT_FAILED,
    EXIT_OK,
    add_config_option,
    loaded_or_none,
    settings_or_exit,
)
from appliance.config import override
from appliance.engine_set import llm_engine, open_bundle
from engines.errors import EngineError
from engines.llm import GenerationStats, Message

EXIT_INTERRUPTED = 130


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("chat", help="stream a reply from the configured LLM")
    parser.add_argument("text")
    parser.add_argument("--model", help="override llm.model (a model name in the bundle)")
    parser.add_argument("--json", action="store_true", help="print one JSON object with the reply and stats")
    add_config_option(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    settings = settings_or_exit(args)
    if not args.text.strip():
        print(
            "error: the text is empty; pass what the person said, e.g. appliance chat 'Hello'",
            file=sys.stderr,
        )
        return EXIT_FAILED
    if args.model:
        settings = override(settings, llm={"model": args.model})
    engine = loaded_or_none(lambda: llm_engine(settings, open_bundle(settings)))
    if engine is None:
        return EXIT_FAILED
    cancel = threading.Event()
    stats = GenerationStats()
    pieces: list[str] = []
    try:
        for piece in engine.stream([Message("user", args.text)], cancel=cancel, stats=stats):
            pieces.append(piece)
            if not args.json:
                sys.stdout.write(piece)
                sys.stdout.flush()
    except KeyboardInterrupt:
        cancel.set()
        print("\n(interrupted)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except EngineError as err:
        print(f"\nerror: {err}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        engine.close()
    _report(args, "".join(pieces), stats)
    return EXIT_OK


def _report(args: argparse.Namespace, reply: str, stats: GenerationStats) -> None:
    decode_s = stats.total_s - (stats.first_token_s or 0.0)
    decode_tokens_per_s = (stats.generated_tokens - 1) / decode_s if decode_s > 0 else 0.0
    if args.json:
        record = {
            "reply": reply,
            "prompt_tokens": stats.prompt_tokens,
            "evaluated_prompt_tokens": stats.evaluated_prompt_tokens,
            "generated_tokens": stats.generated_tokens,
            "first_token_s": stats.first_token_s,
            "total_s": stats.total_s,
            "decode_tokens_per_s": round(decode_tokens_per_s, 2),
            "stop_reason": stats.stop_reason,
        }
        print(json.dumps(record))
        return
    print()
    first = f"{stats.first_token_s:.2f} s" if stats.first_token_s is not None else "none"
    print(
        f"[{stats.generated_tokens} tokens, first after {first}, {decode_tokens_per_s:.1f} tokens/s, "
        f"prompt {stats.evaluated_prompt_tokens}/{stats.prompt_tokens} tokens evaluated, "
        f"stopped: {stats.stop_reason}]",
        file=sys.stderr,
    )
