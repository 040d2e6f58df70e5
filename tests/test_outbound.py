"""The one way out of the device (engines/outbound.py), against a real HTTP server on loopback."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Iterator
from typing import ClassVar

import httpx
import pytest

from bench.site import send, serve_http
from engines.outbound import OutboundError, OutboundRules, check_url, interrupt, open_response, read_body

LOCAL = OutboundRules(("127.0.0.1", "localhost"), "agent.allowed_hosts")


class _Site(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, str]]] = []

    def do_GET(self) -> None:
        _Site.seen.append((self.path, self.headers.get("Host", "")))
        if self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "http://127.0.0.2/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/big":
            send(self, b"y" * 100_000)
        elif self.path == "/slow":
            time.sleep(5)
            send(self, {"late": True})
        else:
            send(self, {"ok": True})

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture(scope="module")
def site() -> Iterator[int]:
    with serve_http(_Site) as port:
        yield port


def _get(url: str, rules: OutboundRules = LOCAL, timeout_s: float = 3.0) -> tuple[int, bytes]:
    with open_response("GET", url, rules, timeout=httpx.Timeout(timeout_s)) as response:
        return response.status_code, read_body(response, rules.max_body_bytes)


def test_a_listed_name_is_resolved_once_and_its_address_connected_to_with_the_name_as_host(site: int) -> None:
    status, body = _get(f"http://localhost:{site}/x?a=1")
    assert status == 200 and b'"ok"' in body
    assert _Site.seen[-1] == ("/x?a=1", f"localhost:{site}")


@pytest.mark.parametrize(
    ("url", "rules", "kind"),
    [
        ("http://127.0.0.2:1/x", LOCAL, "refused_host"),
        ("ftp://127.0.0.1/x", LOCAL, "bad_url"),
        ("http://8.8.8.8/x", OutboundRules(("8.8.8.8",), "agent.allowed_hosts"), "public_address"),
        (
            "https://10.0.0.5/v1",
            OutboundRules(("10.0.0.5",), "llm_server.allowed_hosts", schemes=("http",)),
            "bad_url",
        ),
    ],
)
def test_refusals_name_the_problem_before_any_connection(url: str, rules: OutboundRules, kind: str) -> None:
    with pytest.raises(OutboundError) as refused:
        check_url(url, rules)
    assert refused.value.kind == kind
    if kind == "refused_host":
        assert "agent.allowed_hosts" in str(refused.value)


def test_a_public_address_is_allowed_only_when_the_rules_say_so() -> None:
    rules = OutboundRules(("8.8.8.8",), "llm_server.allowed_hosts", allow_public=True)
    assert check_url("http://8.8.8.8:8000/v1", rules).port == 8000


def test_redirects_are_not_followed_and_answers_are_cut_at_the_limit(site: int) -> None:
    status, _ = _get(f"http://127.0.0.1:{site}/moved")
    assert status == 302 and all(path != "/elsewhere" for path, _host in _Site.seen)
    small = OutboundRules(("127.0.0.1",), "agent.allowed_hosts", max_body_bytes=1000)
    status, body = _get(f"http://127.0.0.1:{site}/big", small)
    assert status == 200 and len(body) == 1000


def test_proxies_in_the_environment_are_not_used(site: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    assert _get(f"http://127.0.0.1:{site}/x")[0] == 200


def test_a_connection_nobody_accepts_and_a_service_that_does_not_answer(site: int) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with pytest.raises(OutboundError) as down:
        _get(f"http://127.0.0.1:{port}/x")
    assert down.value.kind == "unreachable"
    with pytest.raises(OutboundError) as slow:
        _get(f"http://127.0.0.1:{site}/slow", timeout_s=0.5)
    assert slow.value.kind == "timeout"


def test_a_wait_for_the_answer_is_ended_from_another_thread(site: int) -> None:
    sockets: list[socket.socket] = []
    threading.Timer(0.3, lambda: interrupt(sockets[0])).start()
    started = time.monotonic()
    with (
        pytest.raises(OutboundError),
        open_response(
            "GET",
            f"http://127.0.0.1:{site}/slow",
            LOCAL,
            timeout=httpx.Timeout(10.0),
            on_socket=sockets.append,
        ),
    ):
        pass
    assert time.monotonic() - started < 2.0
