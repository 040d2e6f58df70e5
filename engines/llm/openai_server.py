"""The LLM on a site server: an OpenAI-compatible ``/v1/chat/completions``, streamed over HTTP.

For a site whose devices share one GPU box (``llama_cpp.server``, llama.cpp's ``llama-server``, vLLM).
It is the one connection the appliance makes off the device, and only to ``llm.server_url``'s host,
which must be listed in ``llm.allowed_hosts`` and resolve to private addresses (unless
``llm.allow_public_server``): both checked before connecting. The name is resolved once per request
and the checked address is the one connected to.

Timeouts: connecting (``connect_timeout_s``), the reply's first piece (``first_token_timeout_s``: the
server may be evaluating a long prompt or serving other devices) and each later one
(``idle_timeout_s``). A cancel closes the connection within one token; the server stops generating.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from engines.errors import BackendUnavailable
from engines.llm import GenerationStats, LlmOccupancy, Message, PrefillStats
from engines.llm.params import LlmServerParams
from engines.net import host_allowed, is_private_address, name_lookup_allowed

log = logging.getLogger(__name__)

MAX_ERROR_BODY = 2000
_CANCEL_POLL_S = 0.01
_FIX = 'check the site server (llm.server_url) runs and answers, or set llm.backend = "local"'


class LlmServerError(BackendUnavailable):
    """The site server did not answer. ``started``: part of the reply had already been given."""

    def __init__(self, message: str, *, fix: str = _FIX, started: bool = False) -> None:
        super().__init__(message, fix=fix)
        self.reason = message
        self.started = started


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    path: str  # the API's base path, without a trailing slash


def check_server_url(url: str, allowed_hosts: Sequence[str], allow_public: bool) -> Endpoint:
    """The server's endpoint, or the reason the settings do not allow it (nothing is resolved here)."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise BackendUnavailable(
            f"llm.server_url {url!r} is not an http:// URL with a host",
            fix='set llm.server_url = "http://HOST:PORT/v1", the site server\'s OpenAI-compatible API',
        )
    if not host_allowed(parts.hostname, allowed_hosts):
        raise BackendUnavailable(
            f"the LLM server {parts.hostname} is not in llm.allowed_hosts",
            fix=f'add "{parts.hostname}" (or its network) to llm.allowed_hosts',
        )
    endpoint = Endpoint(parts.hostname, parts.port or 80, parts.path.rstrip("/"))
    try:
        private = is_private_address(parts.hostname)
    except ValueError:
        return endpoint  # a name: its addresses are checked when it is resolved
    if not private and not allow_public:
        raise BackendUnavailable(
            f"the LLM server {parts.hostname} is not a private address",
            fix="use the server's address on the site's network, or set llm.allow_public_server = true",
        )
    return endpoint


def resolve(endpoint: Endpoint, allow_public: bool) -> str:
    """The address to connect to: every address the name has must be private (unless allowed)."""
    try:
        with name_lookup_allowed(endpoint.host):  # listed in llm.allowed_hosts (check_server_url)
            infos = socket.getaddrinfo(endpoint.host, endpoint.port, type=socket.SOCK_STREAM)
    except OSError as err:
        raise LlmServerError(f"the LLM server's name {endpoint.host} does not resolve ({err})") from err
    addresses = [str(info[4][0]) for info in infos]
    public = [a for a in addresses if not is_private_address(a)]
    if public and not allow_public:
        raise LlmServerError(
            f"the LLM server {endpoint.host} resolves to the public address {public[0]}",
            fix="use the server's address on the site's network, or set llm.allow_public_server = true",
        )
    return addresses[0]


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
        self.endpoint = check_server_url(server.server_url, server.allowed_hosts, server.allow_public_server)
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

    def _connect(self, timeout_s: float) -> http.client.HTTPConnection:
        address = resolve(self.endpoint, self.server.allow_public_server)
        connection = http.client.HTTPConnection(address, self.endpoint.port, timeout=timeout_s)
        try:
            connection.connect()
        except OSError as err:
            connection.close()
            raise LlmServerError(
                f"cannot connect to the LLM server {self.server.server_url} ({err})"
            ) from err
        return connection

    def _headers(self) -> dict[str, str]:
        headers = {"Host": f"{self.endpoint.host}:{self.endpoint.port}", "Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _get(self, path: str) -> dict[str, Any]:
        connection = self._connect(self.server.server_connect_timeout_s)
        try:
            connection.request("GET", self.endpoint.path + path, headers=self._headers())
            response = connection.getresponse()
            body = response.read(MAX_ERROR_BODY * 10)
        except OSError as err:
            raise LlmServerError(f"the LLM server {self.server.server_url} did not answer ({err})") from err
        finally:
            connection.close()
        if response.status != 200:
            raise LlmServerError(f"the LLM server answered {response.status} to GET {path}")
        answer: dict[str, Any] = json.loads(body)
        return answer

    def _body(self, history: Sequence[Message]) -> bytes:
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
        return json.dumps(body).encode("utf-8")

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
        return f"the LLM server sent no reply within llm.server_first_token_timeout_s = {timeout} s"

    def _stream(
        self, history: Sequence[Message], cancel: threading.Event, stats: GenerationStats, started: float
    ) -> Iterator[str]:
        connection = self._connect(self.server.server_connect_timeout_s)
        done = threading.Event()
        watcher = threading.Thread(target=_close_on_cancel, args=(connection, cancel, done), daemon=True)
        watcher.start()
        pieces = 0
        try:
            sock = connection.sock
            if sock is not None:
                sock.settimeout(self.server.server_first_token_timeout_s)
            try:
                connection.request(
                    "POST",
                    self.endpoint.path + "/chat/completions",
                    body=self._body(history),
                    headers=self._headers(),
                )
                response = connection.getresponse()
            except TimeoutError as err:
                raise LlmServerError(self._no_first_token()) from err
            except OSError as err:
                if cancel.is_set():
                    stats.cancelled, stats.stop_reason = True, "cancelled"
                    return
                raise LlmServerError(
                    f"the LLM server {self.server.server_url} did not answer ({err})"
                ) from err
            if response.status != 200:
                detail = response.read(MAX_ERROR_BODY).decode("utf-8", errors="replace")
                raise LlmServerError(f"the LLM server answered {response.status}: {detail.strip()[:300]}")
            for event in _events(response, cancel):
                if cancel.is_set():
                    stats.cancelled, stats.stop_reason = True, "cancelled"
                    return
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
                        if sock is not None:
                            sock.settimeout(self.server.server_idle_timeout_s)
                    pieces += 1
                    stats.generated_tokens += 1  # a server's stream carries one token per event
                    yield text
            if cancel.is_set():
                stats.cancelled, stats.stop_reason = True, "cancelled"
        except TimeoutError as err:
            if not pieces:
                raise LlmServerError(self._no_first_token()) from err
            raise LlmServerError(
                f"the LLM server stopped sending after {pieces} pieces (nothing for "
                f"llm.server_idle_timeout_s = {self.server.server_idle_timeout_s} s)",
                started=True,
            ) from err
        except (OSError, http.client.HTTPException, ValueError) as err:
            if cancel.is_set():
                stats.cancelled, stats.stop_reason = True, "cancelled"
                return
            raise LlmServerError(
                f"the LLM server's reply broke off after {pieces} pieces ({err or type(err).__name__})",
                started=pieces > 0,
            ) from err
        finally:
            done.set()
            connection.close()


def _events(response: http.client.HTTPResponse, cancel: threading.Event) -> Iterator[dict[str, Any]]:
    """The JSON objects of a server-sent event stream, until ``data: [DONE]``."""
    while not cancel.is_set():
        line = response.readline(1 << 20)
        if not line:
            if cancel.is_set():
                return
            raise http.client.IncompleteRead(b"", None)  # the server closed without [DONE]
        text = line.decode("utf-8", errors="replace").strip()
        if not text.startswith("data:"):
            continue  # blank separators, comments, event names
        data = text[5:].strip()
        if data == "[DONE]":
            return
        event: dict[str, Any] = json.loads(data)
        if "error" in event:
            raise ValueError(f"the server reported: {event['error']}")
        yield event


def _close_on_cancel(
    connection: http.client.HTTPConnection, cancel: threading.Event, done: threading.Event
) -> None:
    """Close the connection as soon as ``cancel`` is set, ending a read that waits for the next token."""
    while not done.wait(_CANCEL_POLL_S):
        if cancel.is_set():
            sock = connection.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            return
