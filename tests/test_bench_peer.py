"""The side-by-side with pipecat: its figures, and the wall between the two environments."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from bench.peer import PEER_SCRIPT, describe, summarize

REPO = Path(__file__).resolve().parents[1]


def _row(ours: float | None, theirs: float | None) -> dict[str, dict[str, float | None]]:
    return {"product": {"latency_ms": ours}, "pipecat": {"latency_ms": theirs}}


def test_the_summary_gives_each_side_its_percentiles_and_the_ratio() -> None:
    rows = [_row(500.0, 1000.0), _row(600.0, 1500.0), _row(700.0, None)]
    found = summarize(rows)
    assert found["product"]["latency_ms"]["count"] == 3
    assert found["pipecat"]["latency_ms"]["count"] == 2
    assert found["pipecat"]["failed"] == 1 and found["product"]["failed"] == 0
    assert found["pipecat_over_product"]["p50"] == round(1250.0 / 600.0, 2)
    text = describe(found)
    assert "no reply: 1" in text and "pipecat / product: p50 2.08x" in text


def test_no_ratio_when_one_side_never_answered() -> None:
    found = summarize([_row(500.0, None)])
    assert "pipecat_over_product" not in found
    assert "n/a" in describe(found)


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_the_peer_script_runs_on_pipecat_alone() -> None:
    foreign = _imported_roots(PEER_SCRIPT) - sys.stdlib_module_names - {"__future__"}
    assert foreign == {"pipecat", "numpy", "soundfile"}


def test_the_product_never_imports_pipecat() -> None:
    for package in ("appliance", "engines", "provisioning"):
        for path in (REPO / package).rglob("*.py"):
            assert "pipecat" not in _imported_roots(path), path
