"""The LLM on a site server: an OpenAI-compatible ``/v1/chat/completions``, streamed over HTTP.

For a site whose devices share one GPU box (``llama_cpp.server``, llama.cpp's ``llama-server``, vLLM).
It reaches only ``llm_server.server_url``'s host, which must be listed in ``llm_server.allowed_hosts`` and resolve to
private addresses (unless ``llm_server.allow_public_server``): the device's outbound rules
(``engines.outbound``), the same as an http tool's, checked before connecting.

Timeouts: connecting (``server_connect_timeout_s``), the reply's first piece
(``server_first_token_timeout_s``: the server may be evaluating a long prompt or serving other devices)
and each later one (``server_idle_timeout_s``). A cancel shuts the connection within one token; the
server stops generating.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx

from engines.errors import BackendUnavailable
from engines.llm import GenerationStats, LlmOccupancy, Message, PrefillStats
from engines.llm.params import LlmServerParams
from engines.outbound import (
    Destination,
    OutboundError,
    OutboundRules,
    check_url,
    interrupt,
    open_response,
    read_body,
)

log = logging.getLogger(__name__)

MAX_ERROR_BODY = 2000
MAX_ANSWER_BYTES = 20000  # GET /models
_CANCEL_POLL_S = 0.01
_FIX = 'check the site server (llm_server.server_url) runs and answers, or set llm.backend = "local"'


class LlmServerError(BackendUnavailable):
    """The site server did not answer. ``started``: part of the reply had already been given."""

    def __init__(self, message: str, *, fix: str = _FIX, started: bool = False) -> None:
        super().__init__(message, fix=fix)
        self.reason = message
        self.started = started


def server_rules(server: LlmServerParams) -> OutboundRules:
    return OutboundRules(
        tuple(server.allowed_hosts),
        "llm_server.allowed_hosts",
        allow_public=server.allow_public_server,
        schemes=("http",),
        max_body_bytes=MAX_ANSWER_BYTES,
    )


def check_server_url(server: LlmServerParams) -> Destination:
    """The server's endpoint, or the reason the settings do not allow it (nothing is resolved here)."""
    url = server.server_url
    try:
        return check_url(url, server_rules(server))
    except OutboundError as err:
        fix = {
            "bad_url": 'set llm_server.server_url = "http://HOST:PORT/v1", the site server\'s OpenAI-compatible API',
            "refused_host": f'add "{urlsplit(url).hostname}" (or its network) to llm_server.allowed_hosts',
        }.get(
            err.kind,
            "use the server's address on the site's network, or set llm_server.allow_public_server = true",
        )
        what = (
            f"llm_server.server_url {url!r} is not an http:// URL with a host"
            if err.kind == "bad_url"
            else f"the LLM server {err}"
        )
        raise BackendUnavailable(what, fix=fix) from err


class OpenAiLlm:
    """Implements ``engines.llm.LlmEngine`` over a site server; its conversations' caches are the
    server's (prefill and end_conversation do nothing here)."""

    def __init__(
        self,
        server: LlmServerParams,
        *,
        api_key: str | None = None,
        system_prompt: str,
        max_reply_tokens: int,
        temperature: float,
        stop: Sequence[str],
        seed: int | None = None,
    ) -> None:
        self.server = server
        self.api_key = api_key
        check_server_url(server)
        self.rules = server_rules(server)
        self.system_prompt = system_prompt
        self.max_reply_tokens = max_reply_tokens
        self.temperature = temperature
        self.stop = tuple(s for s in stop if s)
        self.seed = seed
        self._active = 0
        self._lock = threading.Lock()

    def load(self) -> None:
        """Says in the log whether the server answers now; it may come later, so nothing fails here."""
        try:
            models = self._get("/models")
            names = [m.get("id") for m in models.get("data", [])]
            log.info(
                "LLM server %s answers; its models: %s", self.server.server_url, ", ".join(map(str, names))
            )
        except (LlmServerError, ValueError) as err:
            log.warning("LLM server %s does not answer yet: %s", self.server.server_url, err)

    def close(self) -> None:
        pass

    @property
    def offers_tools(self) -> bool:
        return False

    @property
    def judges_turns(self) -> bool:
        return False  # the audio alone decides when a turn ends (the server's logits are not read)

    def occupancy(self) -> LlmOccupancy:
        with self._lock:
            return LlmOccupancy(slots=max(1, self._active), running=self._active, waiting=0, max_queue=0)

    def end_conversation(self, conversation: str) -> None:
        pass

    def prefill(
        self,
        history: Sequence[Message],
        *,
        cancel: threading.Event | None = None,
        conversation: str | None = None,
    ) -> PrefillStats:
        return PrefillStats()

    def _url(self, path: str) -> str:
        return self.server.server_url.rstrip("/") + path

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def _failed(self, err: OutboundError) -> LlmServerError:
        if err.kind == "unreachable":
            return LlmServerError(f"cannot connect to the LLM server {self.server.server_url} ({err})")
        if err.kind == "timeout":
            return LlmServerError(self._no_first_token())
        return LlmServerError(f"the LLM server {err}")

    def _get(self, path: str) -> dict[str, Any]:
        timeout = httpx.Timeout(self.server.server_connect_timeout_s)
        try:
            with open_response(
                "GET", self._url(path), self.rules, timeout=timeout, headers=self._headers()
            ) as response:
                body = read_body(response, MAX_ANSWER_BYTES)
        except OutboundError as err:
            raise self._failed(err) from err
        except (httpx.HTTPError, OSError) as err:
            raise LlmServerError(f"the LLM server {self.server.server_url} did not answer ({err})") from err
        if response.status_code != 200:
            raise LlmServerError(f"the LLM server answered {response.status_code} to GET {path}")
        answer: dict[str, Any] = json.loads(body)
        return answer

    def _body(self, history: Sequence[Message]) -> dict[str, Any]:
        messages = [{"role": "system", "content": self.system_prompt}]
        messages += [{"role": m.role, "content": m.content} for m in history]
        body: dict[str, Any] = {
            "messages": messages,
            "stream": True,
            "max_tokens": self.max_reply_tokens,
            "temperature": self.temperature,
        }
        if self.server.server_model:
            body["model"] = self.server.server_model
        if self.stop:
            body["stop"] = list(self.stop)
        if self.seed is not None:
            body["seed"] = self.seed
        return body

    def stream(
        self,
        history: Sequence[Message],
        *,
        cancel: threading.Event | None = None,
        stats: GenerationStats | None = None,
        conversation: str | None = None,
        on_end_of_message: Callable[[float], None] | None = None,
    ) -> Iterator[str]:
        stats = stats if stats is not None else GenerationStats()
        cancel = cancel or threading.Event()
        started = time.perf_counter()
        with self._lock:
            self._active += 1
        try:
            yield from self._stream(history, cancel, stats, started)
        finally:
            with self._lock:
                self._active -= 1
            stats.total_s = time.perf_counter() - started

    def _no_first_token(self) -> str:
        timeout = self.server.server_first_token_timeout_s
        return f"the LLM server sent no reply within llm_server.server_first_token_timeout_s = {timeout} s"

    def _stream(
        self, history: Sequence[Message], cancel: threading.Event, stats: GenerationStats, started: float
    ) -> Iterator[str]:
        server = self.server
        # httpx's own read timeout is a backstop: the watchdog holds each wait to its own limit.
        longest = max(server.server_first_token_timeout_s, server.server_idle_timeout_s) + 1.0
        timeout = httpx.Timeout(longest, connect=server.server_connect_timeout_s)
        watchdog = _Watchdog(cancel, server)
        pieces = 0
        try:
            with open_response(
                "POST",
                self._url("/chat/completions"),
                self.rules,
                timeout=timeout,
                json_body=self._body(history),
                headers=self._headers(),
                on_socket=watchdog.attach,
            ) as response:
                if response.status_code != 200:
                    detail = read_body(response, MAX_ERROR_BODY).decode("utf-8", errors="replace")
                    raise LlmServerError(
                        f"the LLM server answered {response.status_code}: {detail.strip()[:300]}"
                    )
                for event in _events(response):
                    if cancel.is_set():
                        break
                    usage = event.get("usage") or {}
                    if usage.get("prompt_tokens"):
                        stats.prompt_tokens = stats.evaluated_prompt_tokens = int(usage["prompt_tokens"])
                    for choice in event.get("choices") or ():
                        text = (choice.get("delta") or {}).get("content") or ""
                        if choice.get("finish_reason"):
                            stats.stop_reason = (
                                "max_tokens" if choice["finish_reason"] == "length" else "end_of_turn"
                            )
                        if not text:
                            continue
                        if pieces == 0:
                            stats.first_token_s = time.perf_counter() - started
                        pieces += 1
                        watchdog.progress()
                        stats.generated_tokens += 1  # a server's stream carries one token per event
                        yield text
        except (OutboundError, httpx.HTTPError, OSError, ValueError) as err:
            if not cancel.is_set():
                raise self._broken(err, pieces, timed_out=watchdog.expired) from err
        finally:
            watchdog.stop()
        if cancel.is_set():
            stats.cancelled, stats.stop_reason = True, "cancelled"

    def _broken(self, err: Exception, pieces: int, *, timed_out: bool) -> LlmServerError:
        timed_out = timed_out or isinstance(err, httpx.TimeoutException)
        if isinstance(err, OutboundError) and not timed_out:
            return self._failed(err)
        if timed_out and not pieces:
            return LlmServerError(self._no_first_token())
        if timed_out:
            return LlmServerError(
                f"the LLM server stopped sending after {pieces} pieces (nothing for "
                f"llm_server.server_idle_timeout_s = {self.server.server_idle_timeout_s} s)",
                started=True,
            )
        return LlmServerError(
            f"the LLM server's reply broke off after {pieces} pieces ({err or type(err).__name__})",
            started=pieces > 0,
        )


def _events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """The JSON objects of a server-sent event stream, until ``data: [DONE]``."""
    for line in response.iter_lines():
        text = line.strip()
        if not text.startswith("data:"):
            continue  # blank separators, comments, event names
        data = text[5:].strip()
        if data == "[DONE]":
            return
        event: dict[str, Any] = json.loads(data)
        if "error" in event:
            raise ValueError(f"the server reported: {event['error']}")
        yield event
    raise httpx.RemoteProtocolError("the server closed the stream without [DONE]")


class _Watchdog:
    """Ends a read that waits on the server for longer than it may, or once the reply is cancelled:
    the first piece within ``server_first_token_timeout_s`` of connecting, each later one within
    ``server_idle_timeout_s``."""

    def __init__(self, cancel: threading.Event, server: LlmServerParams) -> None:
        self.cancel = cancel
        self.expired = False
        self._sock: socket.socket | None = None
        self._wait_s = server.server_first_token_timeout_s
        self._idle_s = server.server_idle_timeout_s
        self._since = time.monotonic()
        self._done = threading.Event()
        threading.Thread(target=self._watch, name="llm-server-watchdog", daemon=True).start()

    def attach(self, sock: socket.socket) -> None:
        self._since, self._sock = time.monotonic(), sock

    def progress(self) -> None:
        self._since, self._wait_s = time.monotonic(), self._idle_s

    def stop(self) -> None:
        self._done.set()

    def _watch(self) -> None:
        while not self._done.wait(_CANCEL_POLL_S):
            if self._sock is None:
                continue  # connecting: httpx's connect timeout holds that wait
            late = time.monotonic() - self._since > self._wait_s
            if self.cancel.is_set() or late:
                self.expired = late and not self.cancel.is_set()
                interrupt(self._sock)
                return
