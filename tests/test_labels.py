"""Every label a turn carries out of the pipeline is one enum member: none is written as a plain
string where it is made, and /metrics, the admin page's schema and the page itself know every member."""

from __future__ import annotations

import ast
import re
from enum import Enum
from pathlib import Path

import pytest

from appliance.admin.schemas import LiveSession, OverlapHeard, SipRegistrationView, TurnView, WithheldClause
from appliance.config import ActivationMode, EndpointerMode
from appliance.daemon.bundle_switch import SwitchHow
from appliance.grounding import WithheldWhy
from appliance.sip.labels import Availability, RegistrationState
from appliance.trace.labels import (
    EndedBy,
    Judge,
    OpenedBy,
    OverlapKind,
    SessionKind,
    SessionState,
    TurnCheck,
    TurnOutcome,
    WordsNotExpected,
)
from tests.fixtures.admin import AdminEnv

ROOT = Path(__file__).resolve().parents[1]
# Keyword arguments and attributes that carry a label across modules.
LABEL_NAMES = frozenset(
    {"by", "endpoint_by", "outcome", "judge", "why", "words_not_expected", "how", "state", "activation"}
)
# Names that libraries use too (``mode="json"``): a literal there is a label only when it is one's value.
SHARED_NAMES = frozenset({"kind", "mode"})
VOCABULARIES: tuple[type[Enum], ...] = (
    EndedBy,
    Judge,
    OpenedBy,
    OverlapKind,
    SessionKind,
    SessionState,
    TurnCheck,
    TurnOutcome,
    WordsNotExpected,
    WithheldWhy,
    EndpointerMode,
    ActivationMode,
    SwitchHow,
    RegistrationState,
    Availability,
)
LABEL_VALUES = frozenset(member.value for vocabulary in VOCABULARIES for member in vocabulary)


def _name_of(node: ast.expr) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def _text(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value:
        return node.value
    return None


def plain_string_labels(source: str, filename: str) -> list[str]:
    """``by="silence"``, ``trace.outcome = "hangup"`` or ``settings.endpointer.mode == "smart_turn"``: a
    label written, or read, as a string literal."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.keyword) and node.arg is not None:
            pairs = [(node.arg, node.value)]
        elif isinstance(node, ast.Assign):
            pairs = [(t.attr, node.value) for t in node.targets if isinstance(t, ast.Attribute)]
        elif isinstance(node, ast.Compare) and len(node.comparators) == 1:
            left, right = node.left, node.comparators[0]
            pairs = [(_name_of(left) or "", right), (_name_of(right) or "", left)]
        else:
            continue
        for name, value in pairs:
            text = _text(value)
            if text is None:
                continue
            if name in LABEL_NAMES or (name in SHARED_NAMES and text in LABEL_VALUES):
                found.append(f"{filename}:{value.lineno}: {name}={text!r}")
    return found


def test_no_label_is_emitted_as_a_plain_string() -> None:
    found = []
    for folder in ("appliance", "engines"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            found += plain_string_labels(path.read_text(), str(path.relative_to(ROOT)))
    assert not found, "labels must be enum members (appliance/trace/labels.py):\n" + "\n".join(found)


def test_the_check_sees_a_label_written_as_a_string() -> None:
    source = (
        'trace.outcome = "hung_up"\nself._end(by="silence")\nx = f(by=EndedBy.SILENCE)\n'
        'if settings.endpointer.mode == "smart_turn": pass\ny = model.dump(mode="json")\n'
        'z = Session(kind="microphone")\n'
    )
    assert sorted(plain_string_labels(source, "m.py")) == [
        "m.py:1: outcome='hung_up'",
        "m.py:2: by='silence'",
        "m.py:4: mode='smart_turn'",
        "m.py:6: kind='microphone'",
    ]


def _schema_enum(model: type, field: str) -> set[str]:
    schema = model.model_json_schema()  # type: ignore[attr-defined]
    prop = schema["properties"][field]
    refs = [prop.get("$ref")] + [option.get("$ref") for option in prop.get("anyOf", [])]
    (ref,) = [r for r in refs if r]
    return set(schema["$defs"][ref.rsplit("/", 1)[1]]["enum"])


@pytest.mark.parametrize(
    ("model", "field", "labels"),
    [
        (TurnView, "endpoint_by", EndedBy),
        (TurnView, "outcome", TurnOutcome),
        (TurnView, "words_not_expected", WordsNotExpected),
        (WithheldClause, "why", WithheldWhy),
        (OverlapHeard, "kind", OverlapKind),
        (SipRegistrationView, "state", RegistrationState),
        (LiveSession, "kind", SessionKind),
        (LiveSession, "state", SessionState),
    ],
)
def test_the_admin_schema_knows_every_label(model: type, field: str, labels: type[Enum]) -> None:
    assert _schema_enum(model, field) == {label.value for label in labels}


def _js_keys(script: str, name: str) -> set[str]:
    found = re.search(rf"const {name} = \{{(.*?)\}};", script, re.S)
    assert found is not None, f"app.js has no {name}"
    return set(re.findall(r"(\w+):", found[1]))


def test_metrics_and_the_page_know_every_label(admin_env: AdminEnv) -> None:
    client = admin_env.client()
    admin_env.login(client)
    metrics = client.get("/metrics").text
    for metric, key, labels in (
        ("appliance_turn_endings_total", "by", EndedBy),
        ("appliance_turn_words_not_expected_total", "why", WordsNotExpected),
        ("appliance_clauses_withheld_total", "why", WithheldWhy),
        ("appliance_overlaps_total", "kind", OverlapKind),
        ("appliance_turn_complete_probability_count", "judge", Judge),
        ("appliance_turns_total", "outcome", TurnOutcome),
        ("appliance_turn_checks_total", "verdict", TurnCheck),
    ):
        shown = set(re.findall(rf'^{metric}\{{{key}="(\w+)"\}}', metrics, re.M))
        assert shown == {label.value for label in labels}, metric
    script = client.get("/static/app.js").text
    assert _js_keys(script, "ENDED_BY") == {label.value for label in EndedBy}
    assert _js_keys(script, "OUTCOMES") == {label.value for label in TurnOutcome}
    assert _js_keys(script, "WITHHELD") == {label.value for label in WithheldWhy}
    assert _js_keys(script, "OVERLAPS") == {label.value for label in OverlapKind}
