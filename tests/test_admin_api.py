"""The admin API over a real trace store: every route, login, roles, CSRF, rate limit, config writes."""

from __future__ import annotations

import os
import re
import socket
import sqlite3
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.admin.schemas import LlmLoad
from appliance.admin.security import SESSION_COOKIE
from appliance.auth.passwords import write_password_file
from appliance.config import Settings
from appliance.grounding import WithheldWhy
from appliance.trace.labels import EndedBy, SessionKind, SessionState, TurnOutcome
from tests.fixtures.admin import (
    ADMIN_PASSWORD,
    ADMIN_USER,
    VIEWER_PASSWORD,
    VIEWER_USER,
    AdminEnv,
    make_admin_env,
    mark_engines_ready,
    recorded_turn,
    stage_ms,
)

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

# Every route that needs a login, with a body that would be accepted once logged in.
PROTECTED = [
    ("GET", "/api/status", None),
    ("GET", "/api/sessions", None),
    ("GET", "/api/turns", None),
    ("GET", "/api/turns/abc", None),
    ("GET", "/api/latency", None),
    ("GET", "/api/config", None),
    ("PUT", "/api/config", {"changes": {"trace": {"budget_ms": 700}}}),
    ("GET", "/api/config/schema", None),
    ("GET", "/api/facts", None),
    ("PUT", "/api/facts/site_facts", {"text": "# Canteen\nOpens at 7.\n"}),
    ("POST", "/api/facts/try", {"question": "When does the canteen open?"}),
    ("POST", "/api/restart", None),
    ("GET", "/api/session", None),
    ("POST", "/api/logout", None),
    ("GET", "/metrics", None),
    ("GET", "/openapi.json", None),
]


def test_every_api_route_of_the_schema_is_listed_as_protected_or_public(admin_env: AdminEnv) -> None:
    client = admin_env.client()
    admin_env.login(client)
    paths = client.get("/openapi.json").json()["paths"]
    listed = {
        path.replace("/abc", "/{turn_id}").replace("/site_facts", "/{tool}") for _, path, _ in PROTECTED
    }
    public = {"/healthz", "/readyz", "/api/login"}
    assert set(paths) <= listed | public, set(paths) - listed - public


@pytest.mark.parametrize(("method", "path", "body"), PROTECTED)
def test_protected_routes_answer_401_without_a_cookie(
    admin_env: AdminEnv, method: str, path: str, body: object
) -> None:
    response = admin_env.client().request(method, path, json=body)
    assert response.status_code == 401, response.text
    assert response.json()["error"] == "not_authenticated"
    assert "log in" in response.json()["message"]


@pytest.mark.parametrize(("method", "path", "body"), PROTECTED)
def test_protected_routes_answer_401_with_a_forged_cookie(
    admin_env: AdminEnv, method: str, path: str, body: object
) -> None:
    client = admin_env.client()
    client.cookies.set(SESSION_COOKIE, "forged-token-value")
    assert client.request(method, path, json=body).status_code == 401


def test_health_probes_need_no_login_and_readiness_follows_the_engines(admin_env: AdminEnv) -> None:
    client = admin_env.client()
    health = client.get("/healthz")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    not_ready = client.get("/readyz")
    assert not_ready.status_code == 503
    assert sorted(not_ready.json()["waiting_for"]) == ["asr", "llm", "tts", "vad"]
    mark_engines_ready(admin_env.registry)
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json() == {**ready.json(), "ready": True, "waiting_for": []}


def test_login_sets_an_httponly_samesite_cookie_and_returns_a_csrf_token(admin_env: AdminEnv) -> None:
    client = admin_env.client()
    response = client.post("/api/login", json={"username": ADMIN_USER, "password": ADMIN_PASSWORD})
    assert response.status_code == 200
    cookie = response.headers["set-cookie"].lower()
    assert f"{SESSION_COOKIE}=" in cookie and "httponly" in cookie and "samesite=strict" in cookie
    assert "secure" not in cookie  # plain HTTP on the local network unless admin.cookie_secure
    body = response.json()
    assert body["username"] == ADMIN_USER and body["role"] == "admin" and len(body["csrf_token"]) >= 32
    session = client.get("/api/session").json()
    assert session["csrf_token"] == body["csrf_token"] and session["refresh_s"] == 2.0


def test_secure_cookie_when_configured(tmp_path: Path, settings, admin_users_file: Path) -> None:
    env = make_admin_env(tmp_path, settings, admin_users_file, cookie_secure=True)
    response = env.client().post("/api/login", json={"username": ADMIN_USER, "password": ADMIN_PASSWORD})
    assert "secure" in response.headers["set-cookie"].lower()


def test_wrong_password_and_unknown_user_get_the_same_401(admin_env: AdminEnv) -> None:
    client = admin_env.client()
    wrong = client.post("/api/login", json={"username": ADMIN_USER, "password": "not the password"})
    unknown = client.post("/api/login", json={"username": "nobody", "password": "not the password"})
    assert wrong.status_code == unknown.status_code == 401
    assert (
        wrong.json()
        == unknown.json()
        == {"error": "bad_credentials", "message": "wrong user name or password"}
    )
    assert SESSION_COOKIE not in client.cookies


def test_no_default_password_without_accounts(tmp_path: Path, settings) -> None:
    env = make_admin_env(tmp_path, settings, tmp_path / "no-users-file")
    response = env.client().post("/api/login", json={"username": "admin", "password": "admin"})
    assert response.status_code == 401
    assert "appliance admin passwd" in response.json()["message"]


def test_the_provisioned_admin_password_logs_in_as_admin(tmp_path: Path, settings) -> None:
    env = make_admin_env(tmp_path, settings, tmp_path / "no-users-file")
    write_password_file(tmp_path / "admin-password", "provisioned secret 42")
    client = env.client()
    response = client.post("/api/login", json={"username": "admin", "password": "provisioned secret 42"})
    assert response.status_code == 200 and response.json()["role"] == "admin"


def test_failed_logins_are_rate_limited_even_for_the_right_password(admin_env: AdminEnv) -> None:
    client = admin_env.client()
    limit = admin_env.settings.admin.login_max_failures
    for _ in range(limit):
        assert (
            client.post("/api/login", json={"username": ADMIN_USER, "password": "guess"}).status_code == 401
        )
    blocked = client.post("/api/login", json={"username": ADMIN_USER, "password": ADMIN_PASSWORD})
    assert blocked.status_code == 429
    assert blocked.json()["error"] == "rate_limited"
    assert 0 < int(blocked.headers["Retry-After"]) <= admin_env.settings.admin.login_window_s
    # The same address trying another account is blocked too.
    other = client.post("/api/login", json={"username": VIEWER_USER, "password": VIEWER_PASSWORD})
    assert other.status_code == 429


def test_logout_needs_csrf_and_ends_the_session(admin_env: AdminEnv) -> None:
    client = admin_env.client()
    token = admin_env.login(client)
    assert client.post("/api/logout").status_code == 403
    assert client.get("/api/status").status_code == 200
    assert client.post("/api/logout", headers={"X-CSRF-Token": token}).status_code == 204
    assert client.get("/api/status").status_code == 401


def test_viewer_reads_but_cannot_change_the_configuration(admin_env: AdminEnv) -> None:
    client = admin_env.client()
    token = admin_env.login(client, VIEWER_USER, VIEWER_PASSWORD)
    assert client.get("/api/config").status_code == 200
    response = client.put(
        "/api/config", json={"changes": {"trace": {"budget_ms": 700}}}, headers={"X-CSRF-Token": token}
    )
    assert response.status_code == 403 and "viewer" in response.json()["message"]
    assert "budget_ms" not in admin_env.config_path.read_text()


def test_config_write_needs_the_csrf_token_of_this_session(admin_env: AdminEnv) -> None:
    client = admin_env.client()
    admin_env.login(client)
    other = admin_env.client()
    other_token = admin_env.login(other)
    change = {"changes": {"trace": {"budget_ms": 700}}}
    for headers in ({}, {"X-CSRF-Token": "wrong"}, {"X-CSRF-Token": other_token}):
        response = client.put("/api/config", json=change, headers=headers)
        assert response.status_code == 403 and response.json()["error"] == "csrf_failed"
    assert "budget_ms" not in admin_env.config_path.read_text()


def test_cross_site_requests_are_refused_even_with_the_token(admin_env: AdminEnv) -> None:
    client = admin_env.client()
    token = admin_env.login(client)
    response = client.put(
        "/api/config",
        json={"changes": {"trace": {"budget_ms": 700}}},
        headers={"X-CSRF-Token": token, "Origin": "http://evil.example"},
    )
    assert response.status_code == 403 and response.json()["error"] == "cross_origin"
    login = admin_env.client().post(
        "/api/login",
        json={"username": ADMIN_USER, "password": ADMIN_PASSWORD},
        headers={"Origin": "http://evil.example"},
    )
    assert login.status_code == 403


def test_config_write_is_validated_atomic_and_says_what_applies_now(admin_env: AdminEnv) -> None:
    client = admin_env.client()
    token = admin_env.login(client)
    os.chmod(admin_env.config_path, 0o640)
    response = client.put(
        "/api/config",
        json={"changes": {"trace": {"budget_ms": 650}, "llm": {"temperature": 0.4}}},
        headers={"X-CSRF-Token": token},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["changed"] == ["llm.temperature", "trace.budget_ms"]
    assert body["applied"] == ["trace.budget_ms"] and body["restart_required"] == ["llm.temperature"]
    written = tomllib.loads(admin_env.config_path.read_text())
    assert written == {
        "agent": {"site_name": "Test site"},
        "llm": {"temperature": 0.4},
        "trace": {"budget_ms": 650},
    }
    assert stat.S_IMODE(admin_env.config_path.stat().st_mode) == 0o640
    assert not [p for p in admin_env.root.iterdir() if p.name.endswith(".tmp")]
    # The budget is in force now: the latency report and the running settings use it.
    assert client.get("/api/latency").json()["budget_ms"] == 650
    assert client.get("/api/config").json()["settings"]["llm"]["temperature"] == 0.0  # not until restart


def test_a_saved_change_keeps_the_file_as_the_technician_wrote_it(
    admin_env: AdminEnv, tmp_path: Path
) -> None:
    facts = tmp_path / "facts.md"
    facts.write_text("# Canteen\nThe canteen opens at 7.\n")
    written_by_hand = (
        "# Plant 3 kiosk, set up by J. Doe\n"
        "[agent]\n"
        'site_name = "Test site"  # as on the sign at the gate\n'
        "\n"
        "[[agent.tools]]\n"
        'name = "site_facts"\n'
        'kind = "facts"\n'
        'description = "the site\'s facts"\n'
        f'file = "{facts}"\n'
        "\n"
        "[trace]\n"
        "budget_ms = 700  # agreed with site IT\n"
    )
    admin_env.config_path.write_text(written_by_hand)
    client = admin_env.client()
    token = admin_env.login(client)
    response = client.put(
        "/api/config", json={"changes": {"trace": {"budget_ms": 650}}}, headers={"X-CSRF-Token": token}
    )
    assert response.status_code == 200, response.text
    assert admin_env.config_path.read_text() == written_by_hand.replace("700  #", "650  #")
    backup = admin_env.config_path.with_name(admin_env.config_path.name + ".bak")
    assert backup.read_text() == written_by_hand


def test_the_facts_api_checks_text_as_the_answer_path_reads_it(admin_env: AdminEnv, tmp_path: Path) -> None:
    from appliance.config import override

    facts = tmp_path / "facts.md"
    facts.write_text("# Canteen\nThe canteen opens at 7.\n")
    tool = {"name": "site_facts", "kind": "facts", "description": "the site's facts", "file": str(facts)}
    admin_env.backend._settings = override(admin_env.settings, agent={"tools": [tool]})
    client = admin_env.client()
    token = admin_env.login(client)
    (shown,) = client.get("/api/facts").json()
    assert shown["tool"] == "site_facts" and shown["sections"] == 1 and "opens at 7" in shown["text"]
    empty = client.put("/api/facts/site_facts", json={"text": "  \n"}, headers={"X-CSRF-Token": token})
    assert empty.status_code == 422 and "holds no text" in empty.json()["message"]
    assert "nothing was written" in empty.json()["message"] and "opens at 7" in facts.read_text()
    assert (
        client.put("/api/facts/other", json={"text": "x"}, headers={"X-CSRF-Token": token}).status_code == 404
    )
    saved = client.put(
        "/api/facts/site_facts",
        json={"text": "# Canteen\nOpens at 8.\n# Parking\nP1."},
        headers={"X-CSRF-Token": token},
    )
    assert saved.status_code == 200 and saved.json()["sections"] == 2 and saved.json()["restart_required"]
    assert facts.read_text() == "# Canteen\nOpens at 8.\n# Parking\nP1.\n"
    assert "opens at 7" in facts.with_name("facts.md.bak").read_text()
    # Without the daemon's pipeline there is nothing to answer or restart with: said so.
    tried = client.post("/api/facts/try", json={"question": "When?"}, headers={"X-CSRF-Token": token})
    assert tried.status_code == 409 and tried.json()["error"] == "not_available"
    viewer = admin_env.client()
    viewer_token = admin_env.login(viewer, VIEWER_USER, VIEWER_PASSWORD)
    for method, path, body in (
        ("PUT", "/api/facts/site_facts", {"text": "x"}),
        ("POST", "/api/facts/try", {"question": "x"}),
        ("POST", "/api/restart", None),
    ):
        answer = viewer.request(method, path, json=body, headers={"X-CSRF-Token": viewer_token})
        assert answer.status_code == 403, (path, answer.text)


def test_a_refused_setting_names_its_key_for_the_form(admin_env: AdminEnv) -> None:
    client = admin_env.client()
    token = admin_env.login(client)
    response = client.put(
        "/api/config", json={"changes": {"llm": {"temperature": 5}}}, headers={"X-CSRF-Token": token}
    )
    assert response.status_code == 422
    (problem,) = response.json()["problems"]
    assert problem["key"] == "llm.temperature" and "less than or equal to 2" in problem["message"]
    schema = {f["key"]: f for section in client.get("/api/config/schema").json() for f in section["fields"]}
    assert schema["llm.temperature"]["maximum"] == 2 and schema["llm.temperature"]["kind"] == "number"
    assert schema["trace.budget_ms"]["unit"] == "ms" and schema["trace.budget_ms"]["live"]
    assert schema["llm.backend"]["kind"] == "choice" and "openai" in schema["llm.backend"]["choices"]


def test_invalid_config_is_refused_with_every_problem_and_nothing_written(admin_env: AdminEnv) -> None:
    client = admin_env.client()
    token = admin_env.login(client)
    before = admin_env.config_path.read_bytes()
    response = client.put(
        "/api/config",
        json={"changes": {"llm": {"model": "gpt4", "temperature": 9}, "nosuch": {"key": 1}}},
        headers={"X-CSRF-Token": token},
    )
    assert response.status_code == 422
    message = response.json()["message"]
    assert "llm.model" in message and "gemma-270m" in message and "llm.temperature" in message
    assert "nosuch" in message and "unknown key" in message
    assert admin_env.config_path.read_bytes() == before


def test_config_is_read_only_when_running_on_the_shipped_default(admin_env: AdminEnv) -> None:
    admin_env.backend.config_path = None
    client = admin_env.client()
    token = admin_env.login(client)
    assert client.get("/api/config").json()["writable"] is False
    response = client.put(
        "/api/config", json={"changes": {"trace": {"budget_ms": 700}}}, headers={"X-CSRF-Token": token}
    )
    assert response.status_code == 409 and "--config" in response.json()["message"]


def test_config_change_overridden_by_the_environment_is_reported(
    admin_env: AdminEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APPLIANCE_TRACE__BUDGET_MS", "900")
    client = admin_env.client()
    token = admin_env.login(client)
    body = client.put(
        "/api/config", json={"changes": {"trace": {"budget_ms": 700}}}, headers={"X-CSRF-Token": token}
    ).json()
    assert body["environment_overrides"] == ["trace.budget_ms"] and body["applied"] == []
    assert "trace.budget_ms" in client.get("/api/config").json()["environment_overrides"]


def test_status_reports_engines_bundle_runtimes_and_host(admin_env: AdminEnv) -> None:
    mark_engines_ready(admin_env.registry)
    client = admin_env.client()
    admin_env.login(client)
    status = client.get("/api/status").json()
    assert status["ready"] is True and status["site_name"] == "Test site"
    assert {e["name"] for e in status["engines"]} == {"vad", "asr", "llm", "tts"}
    assert status["runtimes"]["onnxruntime"]  # installed here
    bundle = status["bundle"]
    assert bundle["error"] is None and "llm/qwen-1.5b" in {a["name"] for a in bundle["artifacts"]}
    host = status["host"]
    assert host["cpu_count"] >= 1 and 0 < host["memory_used_bytes"] < host["memory_total_bytes"]
    assert 0 < host["disk_used_bytes"] < host["disk_total_bytes"]
    assert host["gpu_source"] is None or host["gpus"]


def test_sessions_follow_the_live_registry(admin_env: AdminEnv) -> None:
    client = admin_env.client()
    admin_env.login(client)
    assert client.get("/api/sessions").json() == []
    admin_env.registry.open_session("sip-1", SessionKind.SIP, peer="sip:100@10.0.0.5")
    heard = ["how old is the"]
    admin_env.registry.open_session(
        "mic", SessionKind.MICROPHONE, state_of=lambda: SessionState.LISTENING, heard_of=lambda: heard[0]
    )
    admin_env.registry.update_session("sip-1", state=SessionState.SPEAKING, turn_done=True)
    sessions = {s["session_id"]: s for s in client.get("/api/sessions").json()}
    assert sessions["sip-1"]["state"] == "speaking" and sessions["sip-1"]["turns"] == 1
    assert sessions["sip-1"]["heard"] == ""
    assert sessions["mic"]["kind"] == "microphone" and sessions["mic"]["state"] == "listening"
    assert sessions["mic"]["heard"] == "how old is the"  # the partial transcript, read when shown
    heard[0] = "how old is the Brooklyn Bridge"
    assert client.get("/api/sessions").json()[1]["heard"] == heard[0]
    admin_env.registry.close_session("sip-1")
    assert [s["session_id"] for s in client.get("/api/sessions").json()] == ["mic"]


def test_wake_words_are_counted_per_session_and_since_the_start(admin_env: AdminEnv) -> None:
    """Wake words that opened no turn are seen too: each session's count, and the total after it ended."""
    client = admin_env.client()
    admin_env.login(client)
    wakes = {"kiosk": 2, "call": 1}
    admin_env.registry.open_session("kiosk", SessionKind.MICROPHONE, wakes_of=lambda: wakes["kiosk"])
    admin_env.registry.open_session("call", SessionKind.SIP, wakes_of=lambda: wakes["call"])
    sessions = {s["session_id"]: s for s in client.get("/api/sessions").json()}
    assert sessions["kiosk"]["wakes"] == 2 and sessions["call"]["wakes"] == 1
    admin_env.registry.close_session("call")
    wakes["kiosk"] = 3
    assert client.get("/api/status").json()["wake_words_heard"] == 4
    metrics = client.get("/metrics").text
    assert re.search(r"^appliance_wake_words_heard_total 4\.0$", metrics, re.MULTILINE), metrics


def test_turns_and_latency_come_from_the_trace_store(admin_env: AdminEnv) -> None:
    fast = recorded_turn(transcript="fast one", scale=0.1)
    slow = recorded_turn(transcript="slow one", scale=1.0)
    fast.endpoint_by, fast.turn_checks = EndedBy.SMART_TURN, 1
    slow.endpoint_by, slow.turn_checks, slow.turn_incomplete = EndedBy.INCOMPLETE_SILENCE, 2, 2
    slow.partials, slow.prefill_reused, slow.llm_evaluated_tokens = 3, 6, 8
    slow.outcome = TurnOutcome.HANGUP
    admin_env.store.add(fast)
    admin_env.store.add(slow)
    client = admin_env.client()
    admin_env.login(client)
    turns = client.get("/api/turns", params={"limit": 10}).json()
    assert [t["transcript"] for t in turns] == ["slow one", "fast one"]
    assert [t["outcome"] for t in turns] == ["hangup", "answered"]
    slow_view = turns[0]
    expected_ms = round(stage_ms(slow, "turn_latency"), 1)
    assert slow_view["turn_latency_ms"] == expected_ms and slow_view["over_budget"] is True
    assert turns[1]["over_budget"] is False
    assert slow_view["timeline_s"]["speech_start"] == 0.0
    one = client.get(f"/api/turns/{fast.turn_id}")
    assert one.status_code == 200 and one.json()["transcript"] == "fast one"
    assert client.get("/api/turns/nosuchturn").status_code == 404
    latency = client.get("/api/latency").json()
    assert latency["turns"] == 2 and latency["over_budget"] == 1 and latency["budget_ms"] == 800
    stages = {s["stage"]: s for s in latency["stages"]}
    assert stages["turn_latency"]["count"] == 2 and stages["turn_latency"]["max_ms"] == expected_ms
    assert stages["turn_latency"]["p95_over_budget"] is True and stages["asr"]["budget_ms"] is None
    # How turns ended: per turn (with the endpoint wait), and how often the model heard "unfinished".
    assert (slow_view["endpoint_by"], slow_view["turn_incomplete"]) == ("incomplete_silence", 2)
    assert (slow_view["partials"], slow_view["prefill_reused"], slow_view["llm_evaluated_tokens"]) == (
        3,
        6,
        8,
    )
    assert slow_view["endpoint_wait_ms"] == round(stage_ms(slow, "endpoint_wait"), 1)
    assert (latency["turn_checks"], latency["turn_incomplete"]) == (3, 2)
    assert latency["endings"] == {"smart_turn": 1, "incomplete_silence": 1}


def test_metrics_histograms_count_each_stored_turn_once(admin_env: AdminEnv) -> None:
    client = admin_env.client()
    admin_env.login(client)
    checked = recorded_turn(scale=1.0)
    checked.endpoint_by, checked.turn_checks, checked.turn_incomplete = EndedBy.INCOMPLETE_SILENCE, 2, 1
    admin_env.store.add(checked)
    first = client.get("/metrics")
    assert first.status_code == 200 and first.headers["content-type"].startswith("text/plain")
    assert 'appliance_stage_latency_seconds_count{stage="turn_latency"} 1.0' in first.text
    assert 'appliance_turns_total{outcome="answered"} 1.0' in first.text
    assert "appliance_turns_over_budget_total 1.0" in first.text
    assert 'appliance_turn_checks_total{verdict="checked"} 2.0' in first.text
    assert 'appliance_turn_checks_total{verdict="unfinished"} 1.0' in first.text
    assert 'appliance_turn_endings_total{by="incomplete_silence"} 1.0' in first.text
    assert 'appliance_stage_latency_seconds_count{stage="endpoint_wait"} 1.0' in first.text
    cancelled = recorded_turn(scale=0.1)
    cancelled.cancelled = True
    admin_env.store.add(cancelled)
    admin_env.store.add(recorded_turn(scale=0.1))
    second = client.get("/metrics").text
    assert 'appliance_stage_latency_seconds_count{stage="turn_latency"} 2.0' in second
    assert 'appliance_turns_total{outcome="interrupted"} 1.0' in second
    assert "appliance_ready 0.0" in second
    assert "appliance_llm_slots" not in second  # no LLM loaded: no made-up figures


def test_the_llm_slots_and_queue_are_shown_and_scraped(admin_env: AdminEnv) -> None:
    load = LlmLoad(slots=3, answering=3, waiting=2, max_queue=0, evictions=4, mean_batch=2.5)
    admin_env.registry.watch_llm(lambda: load)
    client = admin_env.client()
    admin_env.login(client)
    assert client.get("/api/status").json()["llm"] == load.model_dump()
    metrics = client.get("/metrics").text
    assert "appliance_llm_slots 3.0" in metrics and "appliance_llm_slots_answering 3.0" in metrics
    assert "appliance_llm_queue 2.0" in metrics and "appliance_llm_evictions_total 4.0" in metrics


def test_metrics_can_be_public_for_a_scraper(tmp_path: Path, settings, admin_users_file: Path) -> None:
    env = make_admin_env(tmp_path, settings, admin_users_file, metrics_public=True)
    assert env.client().get("/metrics").status_code == 200
    assert env.client().get("/api/status").status_code == 401


def test_a_scraper_reads_metrics_with_the_token_file_and_nothing_else(
    tmp_path: Path, settings, admin_users_file: Path
) -> None:
    token_file = tmp_path / "metrics.token"
    token_file.write_text("s3cret-token-for-prometheus\n")
    env = make_admin_env(tmp_path, settings, admin_users_file, metrics_token_file=token_file)
    client = env.client()
    good = client.get("/metrics", headers={"Authorization": "Bearer s3cret-token-for-prometheus"})
    assert good.status_code == 200 and "appliance_ready" in good.text
    assert 'appliance_device_info{device_id="appliance-dev",site_name="Test site",version=' in good.text
    assert "appliance_disk_free_bytes" in good.text and "appliance_memory_total_bytes" in good.text
    wrong = client.get("/metrics", headers={"Authorization": "Bearer s3cret-token-for-prometheuz"})
    assert wrong.status_code == 401 and "metrics_token_file" in wrong.json()["message"]
    assert client.get("/metrics").status_code == 401  # neither a token nor a login
    # the token opens /metrics only
    assert (
        client.get("/api/status", headers={"Authorization": "Bearer s3cret-token-for-prometheus"}).status_code
        == 401
    )
    env.login(client)
    assert client.get("/metrics").status_code == 200  # a logged-in operator still reads it
    token_file.write_text("short")
    refused = env.client().get("/metrics", headers={"Authorization": "Bearer short"})
    assert refused.status_code == 503 and "fewer than 16" in refused.json()["message"]
    token_file.unlink()
    missing = env.client().get("/metrics", headers={"Authorization": "Bearer s3cret-token-for-prometheus"})
    assert missing.status_code == 503 and str(token_file) in missing.json()["message"]
    env.store.close()


@pytest.mark.parametrize(
    ("method", "path", "kwargs"),
    [
        ("GET", "/api/turns?limit=0", {}),
        ("GET", "/api/turns?limit=abc", {}),
        ("GET", "/api/latency?limit=99999999", {}),
        ("GET", "/api/turns/" + "x" * 65, {}),
        ("PUT", "/api/config", {"content": b"{not json", "headers": {"Content-Type": "application/json"}}),
        ("PUT", "/api/config", {"json": {"changes": {"llm": "not a section"}}}),
        ("PUT", "/api/config", {"json": {"changes": {"llm": {"stop": {"nested": 1}}}}}),
        ("PUT", "/api/config", {"json": {"changes": {"llm": {"temperature": 0.3}}, "extra": 1}}),
        ("PUT", "/api/config", {"content": b"x" * 70_000, "headers": {"Content-Type": "application/json"}}),
        ("GET", "/api/nosuchroute", {}),
        ("DELETE", "/api/status", {}),
    ],
)
def test_bad_requests_get_a_4xx_with_a_message(
    admin_env: AdminEnv, method: str, path: str, kwargs: dict
) -> None:
    client = admin_env.client()
    token = admin_env.login(client)
    headers = {"X-CSRF-Token": token, **kwargs.pop("headers", {})}
    response = client.request(method, path, headers=headers, **kwargs)
    assert 400 <= response.status_code < 500, response.text
    body = response.json()
    assert body["error"] and len(body["message"]) > 10


def test_bad_login_bodies_get_a_4xx(admin_env: AdminEnv) -> None:
    client = admin_env.client()
    for body in ({}, {"username": "", "password": "x"}, {"username": "a" * 65, "password": "x"}, [1, 2]):
        response = client.post("/api/login", json=body)
        assert response.status_code == 422, body
        assert response.json()["error"] == "invalid_request" and response.json()["message"], body


def test_pages_redirect_to_login_and_carry_security_headers(admin_env: AdminEnv) -> None:
    client = admin_env.client()
    for path, target in (("/", "/login"), ("/docs", "/login?next=/docs")):
        response = client.get(path, follow_redirects=False)
        assert response.status_code == 303 and response.headers["location"] == target
    login_page = client.get("/login")
    assert login_page.status_code == 200 and "login.js" in login_page.text
    assert "default-src 'self'" in login_page.headers["content-security-policy"]
    assert login_page.headers["x-frame-options"] == "DENY"
    admin_env.login(client)
    page = client.get("/")
    assert page.status_code == 200 and 'id="latency-plot"' in page.text
    docs = client.get("/docs")
    assert docs.status_code == 200 and "/vendor/swagger-ui/swagger-ui-bundle.js" in docs.text
    for asset in (
        "/static/app.js",
        "/static/plot.js",
        "/static/style.css",
        "/vendor/swagger-ui/swagger-ui-bundle.js",
    ):
        assert client.get(asset).status_code == 200, asset
    assert client.get("/favicon.ico").headers["content-type"].startswith("image/svg")
    assert client.get("/api/status").headers["cache-control"] == "no-store"


def test_the_page_names_every_reason_a_clause_was_not_said(admin_env: AdminEnv) -> None:
    client = admin_env.client()
    admin_env.login(client)
    script = client.get("/static/app.js").text
    assert all(f"{why.value}: " in script for why in WithheldWhy), "app.js WITHHELD lacks a reason"


def test_page_assets_name_no_address_outside_the_device(admin_env: AdminEnv) -> None:
    client = admin_env.client()
    admin_env.login(client)
    for path in (
        "/",
        "/login",
        "/docs",
        "/static/app.js",
        "/static/plot.js",
        "/static/login.js",
        "/static/docs.js",
    ):
        text = client.get(path).text
        # Only the SVG namespace URI (an identifier, never fetched) may look like an address.
        assert "http" not in text.replace("http://www.w3.org/2000/svg", ""), path


def test_oversized_bodies_are_refused_with_413_with_or_without_a_length(admin_env: AdminEnv) -> None:
    client = admin_env.client()
    token = admin_env.login(client)

    def chunks() -> Iterator[bytes]:  # sent chunked: no Content-Length to check up front
        for _ in range(100):
            yield b"x" * 1000

    headers = {"X-CSRF-Token": token, "Content-Type": "application/json"}
    for content in (b"x" * 70_000, chunks()):
        response = client.put("/api/config", content=content, headers=headers)
        assert response.status_code == 413 and response.json()["error"] == "too_large"
    assert client.post("/api/login", content=chunks(), headers=headers).status_code == 413


def test_a_persona_too_long_for_the_context_is_refused_before_it_can_stop_the_daemon(
    admin_env: AdminEnv,
) -> None:
    """A 20 KB persona passes the schema, but the daemon could not start with it (the system prompt
    would not fit the context): the page refuses it, naming the key and the token count, and writes nothing."""
    client = admin_env.client()
    token = admin_env.login(client)
    before = admin_env.config_path.read_bytes()
    persona = "You answer questions about the loading bays and the canteen. " * 330  # about 20 KB
    response = client.put(
        "/api/config", json={"changes": {"agent": {"persona": persona}}}, headers={"X-CSRF-Token": token}
    )
    assert response.status_code == 422, response.text
    message = response.json()["message"]
    assert "agent.persona" in message and "tokens" in message and "llm.context_tokens" in message
    assert admin_env.config_path.read_bytes() == before
    fine = client.put(
        "/api/config",
        json={"changes": {"agent": {"persona": "You are brief."}}},
        headers={"X-CSRF-Token": token},
    )
    assert fine.status_code == 200, fine.text


def test_status_carries_the_daemons_notice_for_the_banner(
    tmp_path: Path, settings: Settings, admin_users_file: Path
) -> None:
    notice = "site.toml could not be used (llm.model); running with the last configuration that started"
    env = make_admin_env(tmp_path, settings, admin_users_file, notice=notice)
    client = env.client()
    env.login(client)
    assert client.get("/api/status").json()["notice"] == notice
    env.store.close()
    (tmp_path / "plain").mkdir()
    plain = make_admin_env(tmp_path / "plain", settings, admin_users_file)
    client = plain.client()
    plain.login(client)
    assert client.get("/api/status").json()["notice"] is None
    plain.store.close()


def test_turns_the_store_could_not_keep_are_shown_not_hidden(admin_env: AdminEnv) -> None:
    # A full disk, as SQLite reports it (SQLITE_FULL): the database may not grow past its pages.
    store = admin_env.store
    store.add(recorded_turn(transcript="kept"))
    (pages,) = store._db.execute("PRAGMA page_count").fetchone()
    store._db.execute(f"PRAGMA max_page_count = {pages}")
    big = recorded_turn(transcript="lost " * 4000)
    with pytest.raises(sqlite3.OperationalError, match="full"):
        store.add(big)
    client = admin_env.client()
    admin_env.login(client)
    status = client.get("/api/status").json()
    assert status["turns_not_stored"] == 1
    assert "1 turn(s) could not be stored" in status["notice"] and "free disk space" in status["notice"]
    assert "appliance_turns_not_stored 1.0" in client.get("/metrics").text
    assert [t["transcript"] for t in client.get("/api/turns").json()] == ["kept"]  # nothing stored is lost


def test_a_change_the_machine_cannot_honour_is_refused_before_it_is_written(
    admin_env: AdminEnv, tmp_path: Path
) -> None:
    """A port another program holds, a folder with no bundle, a database folder that cannot be
    written: each would stop the next start, so the page refuses it, naming the key, and writes nothing."""
    client = admin_env.client()
    token = admin_env.login(client)
    before = admin_env.config_path.read_bytes()
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        changes = {
            "sip": {"enabled": True, "bind_host": "127.0.0.1", "port": port, "tcp": False},
            "bundle": {"dir": str(tmp_path / "no-bundle-here")},
            "trace": {"db_path": str(not_a_folder / "turns.sqlite3")},
        }
        response = client.put("/api/config", json={"changes": changes}, headers={"X-CSRF-Token": token})
    assert response.status_code == 422, response.text
    message = response.json()["message"]
    assert f"sip.port: UDP 127.0.0.1:{port} cannot be used: another program already listens there" in message
    assert "bundle.dir" in message and "no manifest.json" in message
    assert "trace.db_path" in message and "cannot be written" in message
    assert admin_env.config_path.read_bytes() == before
    # The same port once it is free again is accepted.
    fine = client.put(
        "/api/config",
        json={"changes": {"sip": {"enabled": True, "bind_host": "127.0.0.1", "port": port, "tcp": False}}},
        headers={"X-CSRF-Token": token},
    )
    assert fine.status_code == 200, fine.text


def test_output_quality_is_counted_per_bundle_version_on_metrics_and_the_latency_report(
    admin_env: AdminEnv,
) -> None:
    """Turns answered by two bundle versions: the newer one unsure and repeated at, the older one not."""
    client = admin_env.client()
    admin_env.login(client)
    for index in range(4):
        old = recorded_turn(transcript=f"what time do you open on day {index}")
        old.bundle_version, old.asr_avg_logprob, old.asr_no_speech_p = "17d81a", -0.3, 0.01
        admin_env.store.add(old)
    for index in range(2):
        new = recorded_turn(transcript="where is the loading dock")
        new.bundle_version, new.asr_avg_logprob, new.asr_no_speech_p = "3fa9c2", -1.4, 0.2
        new.repeated = index == 1
        admin_env.store.add(new)
    quality = {q["version"]: q for q in client.get("/api/latency").json()["quality"]}
    assert quality["3fa9c2"]["turns"] == 2 and quality["3fa9c2"]["avg_logprob"] == -1.4
    assert quality["3fa9c2"]["signals"] == {
        "unsure": 2,
        "repeated": 1,
        "barge_in": 0,
        "tool_failed": 0,
        "fallback": 0,
        "empty": 0,
    }
    assert quality["17d81a"]["turns"] == 4 and sum(quality["17d81a"]["signals"].values()) == 0
    metrics = client.get("/metrics").text
    assert 'appliance_turns_heard_total{version="3fa9c2"} 2.0' in metrics
    assert 'appliance_turns_heard_total{version="17d81a"} 4.0' in metrics
    assert 'appliance_turn_quality_signals_total{signal="unsure",version="3fa9c2"} 2.0' in metrics
    assert 'appliance_turn_quality_signals_total{signal="repeated",version="3fa9c2"} 1.0' in metrics
    assert 'appliance_asr_avg_logprob_count{version="17d81a"} 4.0' in metrics
