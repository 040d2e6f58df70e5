"""The README and the pages under docs/: every link leads somewhere, every path named exists, and every
command they show is one the product has (its subcommand and its options)."""

from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
from pathlib import Path

import pytest

from appliance.cli import build_parser
from bench.__main__ import BENCHMARKS

REPO = Path(__file__).resolve().parents[1]
PAGES = sorted(
    [
        REPO / "README.md",
        REPO / "ARCHITECTURE.md",
        REPO / "systemd" / "README.md",
        *(REPO / "docs").glob("*.md"),
    ]
)
TOP_DIRS = (
    "appliance",
    "bench",
    "build_scripts",
    "deploy",
    "docs",
    "engines",
    "hw_tests",
    "provisioning",
    "scripts",
    "systemd",
    "tests",
)
MADE_AT_RUN_TIME = ("bench/results", "bench-results")  # written by the benchmarks, not kept

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
SPAN = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)


def _ids(pages: list[Path]) -> list[str]:
    return [str(p.relative_to(REPO)) for p in pages]


def _slug(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _commands(text: str) -> list[str]:
    """Command lines in fenced blocks (without a ``$ `` prompt or comment) and in inline code."""
    found = []
    for block in FENCE.findall(text):
        for line in block.splitlines():
            line = line.split("  #")[0].strip().removeprefix("$ ").rstrip("\\").strip()
            found.append(line)
    found += SPAN.findall(FENCE.sub("", text))
    return [c for c in found if re.match(r"(\.venv/bin/)?(appliance|python3? -m|make) ", c)]


def test_there_are_pages_to_check() -> None:
    assert len(PAGES) >= 12 and (REPO / "docs" / "configuration.md") in PAGES


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_every_link_leads_to_a_file_and_heading_that_exist(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    broken = []
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md":
            headings = {_slug(h) for h in re.findall(r"^#+ (.+)$", file.read_text(encoding="utf-8"), re.M)}
            if anchor not in headings:
                broken.append(f"{target}: no heading #{anchor}")
    assert not broken, broken


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_every_path_named_exists(page: Path) -> None:
    missing = []
    for span in SPAN.findall(page.read_text(encoding="utf-8")):
        first = span.split()[0] if span.split() else ""
        if "/" not in first or not first.startswith(tuple(d + "/" for d in TOP_DIRS)):
            continue
        if any(mark in first for mark in "*<{[") or first.startswith(MADE_AT_RUN_TIME):
            continue
        path = first.rstrip(".,:;)").split("::")[0]
        if not (REPO / path).exists():
            missing.append(path)
    assert not missing, missing


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def _appliance_problem(words: list[str]) -> str | None:
    parser = build_parser()
    known = _options(parser)
    for word in words:
        if word.startswith("-"):
            name = word.split("=")[0]
            if name not in known and name not in _options(parser):
                return f"option {name} unknown to `{parser.prog}`"
            continue
        children = _subparsers(parser)
        if not children:
            continue  # an argument
        if word not in children:
            return f"`{parser.prog} {word}`: no such command (has {', '.join(sorted(children))})"
        parser = children[word]
        known = _options(parser)
    return None


def _problem(command: str) -> str | None:
    try:
        words = shlex.split(command.replace("|", " "))
    except ValueError:
        words = command.split()
    words = [w.strip("[]") for w in words if w.strip("[]") not in ("", "...")]
    if words[0].endswith("appliance"):
        return _appliance_problem(words[1:])
    if words[0] == "make":
        targets = re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(encoding="utf-8"), re.M)
        wanted = [w for w in words[1:] if "=" not in w and not w.startswith("-")]
        return next((f"make {w}: no such target" for w in wanted if w not in targets), None)
    module = words[2]
    if module == "bench":
        name = words[3] if len(words) > 3 and not words[3].startswith("-") else None
        if name is not None and name.upper() != name and name not in BENCHMARKS:
            return f"python -m bench {name}: no such benchmark"
        return None
    if importlib.util.find_spec(module) is None:
        return f"python -m {module}: no such module"
    return None


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_every_command_shown_is_one_the_product_has(page: Path) -> None:
    problems = []
    for command in _commands(page.read_text(encoding="utf-8")):
        problem = _problem(command)
        if problem is not None:
            problems.append(f"{command!r}: {problem}")
    assert not problems, problems


def test_the_check_finds_a_wrong_command_and_a_wrong_option() -> None:
    assert _problem("appliance bundel verify") is not None
    assert _problem("appliance config check --no-such-flag site.toml") is not None
    assert _problem("python -m bench no_such_bench") is not None
    assert _problem("make no-such-target") is not None
    assert _problem("appliance config check site.toml") is None
    assert _problem("python -m bench turn --limit 8") is None
