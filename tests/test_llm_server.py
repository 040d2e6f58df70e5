"""llm.backend = "openai": replies streamed from a real ``python -m llama_cpp.server`` (the Gemma file of
the bundle) on loopback, cancel within one token, and what happens when the server is down, is killed
mid-reply or is slow to its first token; and the hosts the settings refuse before any connection."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.config import load_settings, override
from appliance.daemon.start_problems import llm_server_problems
from appliance.engine_set import llm_engine
from bench.llm_server import LlamaServer
from engines.bundle import Bundle
from engines.errors import BackendUnavailable
from engines.llm import GenerationStats, Message
from engines.llm.fallback import LOCAL, SERVER, ServerWithFallback
from engines.llm.llamacpp import LlamaCppLlm
from engines.llm.openai_server import LlmServerError, OpenAiLlm, check_server_url
from engines.llm.params import LlmServerParams
from tests.fixtures.daemon_proc import free_tcp_port

QUESTION = [Message("user", "What is the door code of the depot?")]
STORY = [Message("user", "Tell me a long story about a dragon who guards a railway depot.")]


@pytest.fixture(scope="module")
def server(bundle: Bundle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    running = LlamaServer(bundle.path("llm/gemma-270m"), tmp_path_factory.mktemp("server") / "server.log")
    yield running
    running.stop()


def _remote(url: str, *, reply_tokens: int = 24, **timeouts: float) -> OpenAiLlm:
    settings = LlmServerParams(
        server_url=url,
        allowed_hosts=("127.0.0.1",),
        server_connect_timeout_s=2.0,
        server_first_token_timeout_s=timeouts.get("first", 60.0),
        server_idle_timeout_s=timeouts.get("idle", 30.0),
    )
    return OpenAiLlm(
        settings,
        system_prompt="You are the voice of the Northgate depot. The door code of the depot is 4719.",
        max_reply_tokens=reply_tokens,
        temperature=0.0,
        stop=("\n\n",),
        seed=0,
    )


def test_a_reply_streams_from_the_site_server(server: LlamaServer) -> None:
    engine = ServerWithFallback(_remote(server.url), None, retry_s=30.0)
    stats = GenerationStats()
    pieces = list(engine.stream(QUESTION, stats=stats, conversation="a"))
    assert len(pieces) >= 3 and "".join(pieces).strip()
    assert stats.backend == SERVER and stats.generated_tokens == len(pieces)
    assert stats.first_token_s is not None and stats.first_token_s < stats.total_s
    assert stats.stop_reason in ("end_of_turn", "max_tokens") and not stats.cancelled


def test_a_cancel_closes_the_stream_within_one_token_and_the_server_takes_the_next(
    server: LlamaServer,
) -> None:
    remote = _remote(server.url, reply_tokens=200)
    cancel, stats, seen = threading.Event(), GenerationStats(), []
    for piece in remote.stream(STORY, cancel=cancel, stats=stats):
        seen.append(piece)
        assert len(seen) <= 3, "a piece came after the cancel"
        if len(seen) == 3:
            cancel.set()
    assert stats.cancelled and stats.stop_reason == "cancelled" and stats.generated_tokens == 3
    assert remote.occupancy().running == 0
    again = GenerationStats()
    assert "".join(_remote(server.url).stream(QUESTION, stats=again)).strip()
    assert not again.cancelled


def test_a_server_that_is_down_is_answered_by_the_local_model(gemma_llm: LlamaCppLlm) -> None:
    down = f"http://127.0.0.1:{free_tcp_port()}/v1"  # nothing listens there
    engine = ServerWithFallback(_remote(down), gemma_llm, retry_s=60.0)
    stats = GenerationStats()
    started = time.monotonic()
    reply = "".join(engine.stream(QUESTION, stats=stats, conversation="down"))
    assert reply.strip() and time.monotonic() - started < 30
    assert stats.backend.startswith(
        f"{LOCAL} (the site server failed: cannot connect to the LLM server {down}"
    )
    assert stats.generated_tokens > 0
    # within llm_server.server_retry_s the local model answers without trying the server again
    again = GenerationStats()
    assert "".join(engine.stream(QUESTION, stats=again, conversation="down")).strip()
    assert again.backend.startswith(f"{LOCAL} (the site server failed less than 60 s ago")
    gemma_llm.end_conversation("down")
    # without a local model the failure is the turn's, with the URL and the fix
    with pytest.raises(LlmServerError, match="cannot connect") as err:
        list(ServerWithFallback(_remote(down), None, retry_s=30.0).stream(QUESTION))
    assert "llm_server.server_url" in (err.value.fix or "")


def test_a_server_killed_mid_reply_ends_the_reply_and_the_next_goes_local(
    bundle: Bundle, gemma_llm: LlamaCppLlm, tmp_path: Path
) -> None:
    doomed = LlamaServer(bundle.path("llm/gemma-270m"), tmp_path / "doomed.log")
    engine = ServerWithFallback(_remote(doomed.url, reply_tokens=200, idle=30.0), gemma_llm, retry_s=60.0)
    seen: list[str] = []
    started = time.monotonic()
    try:
        with pytest.raises(LlmServerError, match=r"broke off|stopped sending") as err:
            for piece in engine.stream(STORY, conversation="killed"):
                seen.append(piece)
                if len(seen) == 3:
                    doomed.stop()  # SIGKILL
    finally:
        if doomed.process.poll() is None:
            doomed.stop()
    assert err.value.started and len(seen) == 3
    assert (
        time.monotonic() - started < 25
    )  # the closed connection is seen at once, not after the idle timeout
    stats = GenerationStats()
    assert "".join(engine.stream(QUESTION, stats=stats, conversation="killed")).strip()
    assert stats.backend.startswith(LOCAL)
    gemma_llm.end_conversation("killed")


def test_a_slow_first_token_falls_back_to_the_local_model(
    server: LlamaServer, gemma_llm: LlamaCppLlm
) -> None:
    # a long history: the real server evaluates it for longer than the first-token timeout allows
    filler = "The spare parts for the conveyor belts arrived late again this week. " * 40
    history = [Message("user", filler), Message("assistant", "Noted."), *QUESTION]
    engine = ServerWithFallback(_remote(server.url, first=0.3), gemma_llm, retry_s=0.0)
    stats = GenerationStats()
    reply = "".join(engine.stream(history, stats=stats, conversation="slow"))
    assert reply.strip()
    assert "sent no reply within llm_server.server_first_token_timeout_s = 0.3 s" in stats.backend
    gemma_llm.end_conversation("slow")
    time.sleep(3)  # let the server finish the abandoned prompt before the next test


def test_hosts_the_settings_do_not_allow_are_refused_before_any_connection() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    try:
        with pytest.raises(BackendUnavailable, match=r"not in llm_server\.allowed_hosts"):
            OpenAiLlm(
                LlmServerParams(server_url=f"http://127.0.0.1:{port}/v1", allowed_hosts=("10.0.0.0/8",)),
                system_prompt="",
                max_reply_tokens=8,
                temperature=0.0,
                stop=(),
            )
        with pytest.raises(TimeoutError):
            listener.accept()  # nothing connected
    finally:
        listener.close()
    with pytest.raises(BackendUnavailable, match="not a private address") as err:
        check_server_url(LlmServerParams(server_url="http://8.8.8.8:8000/v1", allowed_hosts=("8.8.8.8",)))
    assert "allow_public_server" in (err.value.fix or "")
    public = LlmServerParams(
        server_url="http://8.8.8.8:8000/v1", allowed_hosts=("8.8.8.8",), allow_public_server=True
    )
    assert check_server_url(public).port == 8000
    with pytest.raises(BackendUnavailable, match="not an http:// URL"):
        check_server_url(LlmServerParams(server_url="https://10.0.0.5/v1", allowed_hosts=("10.0.0.5",)))


def test_the_settings_build_a_server_engine_with_the_local_model_behind_it(bundle: Bundle) -> None:
    base = load_settings(None)
    settings = override(
        base,
        llm={"backend": "openai", "model": "gemma-270m"},
        llm_server={"server_url": "http://10.20.0.5:8000/v1", "allowed_hosts": ["10.20.0.0/16"]},
    )
    assert llm_server_problems(settings) == []
    engine = llm_engine(settings, bundle)
    assert isinstance(engine, ServerWithFallback) and isinstance(engine.local, LlamaCppLlm)
    assert not engine.offers_tools
    alone = llm_engine(override(settings, llm_server={"server_fallback": "none"}), bundle)
    assert isinstance(alone, ServerWithFallback) and alone.local is None
    from appliance.admin.daemon import engine_states

    (llm_state,) = [e for e in engine_states(settings) if e.name == "llm"]
    assert llm_state.backend == "site server http://10.20.0.5:8000/v1, then the local gemma-270m"
    refused = override(settings, llm_server={"allowed_hosts": []})
    (problem,) = llm_server_problems(refused)
    assert problem.key == "llm_server.server_url" and "not in llm_server.allowed_hosts" in problem.message
