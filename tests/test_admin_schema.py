"""schemathesis against the admin API's own OpenAPI schema, logged in as an admin: no answer is a
500, and answers match the schema. Bounded examples per operation keep it well under a minute."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.core.result import Err
from schemathesis.schemas import APIOperation

from appliance.admin.security import SESSION_COOKIE
from appliance.config import Settings
from appliance.trace.labels import SessionKind
from tests.fixtures.admin import AdminEnv, make_admin_env, mark_engines_ready, recorded_turn

EXAMPLES_PER_OPERATION = 20
CHECKS = {
    GenerationMode.POSITIVE: [not_a_server_error, response_schema_conformance, status_code_conformance],
    # Negative cases may drop the session cookie, which the test then adds back (a negative case
    # "accepted" for that reason is no finding); bad-input rejection is checked route by route in
    # test_admin_api.py.
    GenerationMode.NEGATIVE: [not_a_server_error, response_schema_conformance, status_code_conformance],
}


@pytest.fixture(scope="module")
def fuzzed_env(
    tmp_path_factory: pytest.TempPathFactory, settings: Settings, admin_users_file: Path
) -> Iterator[AdminEnv]:
    # A high login limit: the fuzzer tries many wrong passwords, and the limit itself is tested elsewhere.
    env = make_admin_env(tmp_path_factory.mktemp("fuzz"), settings, admin_users_file, login_max_failures=1000)
    mark_engines_ready(env.registry)
    env.registry.open_session("sip-1", SessionKind.SIP, peer="sip:100@192.0.2.10")
    for scale in (0.1, 0.5, 1.0):
        env.store.add(recorded_turn(scale=scale))
    yield env
    env.store.close()


@pytest.fixture(scope="module")
def login(fuzzed_env: AdminEnv) -> dict[str, str]:
    client = fuzzed_env.client()
    token = fuzzed_env.login(client)
    return {"cookie": client.cookies[SESSION_COOKIE], "csrf": token}


def _operations(env: AdminEnv) -> list[APIOperation]:
    schema = schemathesis.openapi.from_dict(env.app.openapi())
    schema.app = env.app
    operations = []
    for result in schema.get_all_operations():
        if isinstance(result, Err):
            pytest.fail(f"the admin page's OpenAPI schema has an invalid operation: {result.err()}")
        operations.append(result.ok())
    # Logging out would end the session the other operations run in; it has its own API test.
    return [op for op in operations if op.path != "/api/logout"]


def test_the_schema_covers_every_api_operation(fuzzed_env: AdminEnv) -> None:
    labels = {op.label for op in _operations(fuzzed_env)}
    assert {
        "GET /api/status",
        "GET /api/turns/{turn_id}",
        "PUT /api/config",
        "POST /api/login",
        "GET /metrics",
    } <= labels
    assert len(labels) == 17  # the control panel: config/schema, facts (GET, PUT), facts/try, restart


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=lambda m: m.value)
def test_no_server_errors_and_answers_match_the_schema(
    fuzzed_env: AdminEnv, login: dict[str, str], mode: GenerationMode
) -> None:
    """Valid requests (positive) and requests that break the schema (negative), for every operation;
    the first failing operation fails the test with schemathesis's report and a curl line."""
    exercised = []
    for operation in _operations(fuzzed_env):

        @given(case=operation.as_strategy(mode))
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def check(case: schemathesis.Case) -> None:
            case.call_and_validate(
                headers={"X-CSRF-Token": login["csrf"]},
                cookies={SESSION_COOKIE: login["cookie"]},
                checks=CHECKS[mode],
            )

        try:
            check()
        except Unsatisfiable:
            # No parameters or body to break (GET /healthz): nothing negative to send.
            assert mode is GenerationMode.NEGATIVE, operation.label
            continue
        exercised.append(operation.label)
    expected = 17 if mode is GenerationMode.POSITIVE else 5  # turns, turns/{id}, latency, config PUT, login
    assert len(exercised) >= expected, exercised
