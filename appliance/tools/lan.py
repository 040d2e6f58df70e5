"""An HTTP call to a service on the site's LAN: one of the two exceptions to the air gap, only to the
hosts listed in ``agent.allowed_hosts`` and only at private addresses (``engines.outbound``, checked
before any connection; no redirects followed)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote, urlsplit

MAX_BODY_BYTES = 256 * 1024  # read at most this much of an answer (a 10 MB reply is cut here)


class ToolFailed(Exception):
    """The service could not be used; ``kind``: refused_host, timeout, unreachable, http_status, bad_answer."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def build_url(template: str, arguments: dict[str, Any]) -> str:
    """The URL with each ``{name}`` replaced by its argument, percent-encoded (an argument cannot
    change the host or add a path segment)."""
    url = template
    for key, value in arguments.items():
        url = url.replace("{" + key + "}", quote(str(value), safe=""))
    return url


def call_service(
    url: str,
    *,
    method: str,
    allowed_hosts: Sequence[str],
    timeout_s: float,
    body: dict[str, Any] | None = None,
) -> tuple[str, Any]:
    """(content type, decoded answer: JSON when it is JSON, else text) of one request, under the
    device's outbound rules (``engines.outbound``): a listed host on the site's network."""
    # Here, not at the top: the tool box (and the admin page's facts editor with it) loads without the
    # HTTP client, as on a GPU check machine that carries only what it runs.
    import httpx

    from engines.outbound import OutboundError, OutboundRules, open_response, read_body

    rules = OutboundRules(tuple(allowed_hosts), "agent.allowed_hosts", max_body_bytes=MAX_BODY_BYTES)
    headers = {"Accept": "application/json, text/plain"}
    try:
        with open_response(
            method, url, rules, timeout=httpx.Timeout(timeout_s), json_body=body, headers=headers
        ) as response:
            raw = read_body(response, MAX_BODY_BYTES)
    except OutboundError as err:
        raise ToolFailed(_KINDS.get(err.kind, err.kind), str(err)) from err
    except httpx.TimeoutException as err:
        raise ToolFailed("timeout", f"{_host(url)} did not answer within {timeout_s:g} s") from err
    except (httpx.HTTPError, OSError) as err:
        raise ToolFailed("unreachable", f"{_host(url)}: {err}") from err
    if not 200 <= response.status_code < 300:
        raise ToolFailed("http_status", f"{_host(url)} answered HTTP {response.status_code}")
    content_type = response.headers.get("Content-Type", "")
    text = raw.decode("utf-8", errors="replace")
    if "json" in content_type:
        try:
            return content_type, json.loads(text)
        except json.JSONDecodeError:
            return content_type, text  # cut short at MAX_BODY_BYTES, or not JSON after all: as text
    return content_type, text


# The outbound rules' refusals, as the tool's failure kinds (a bad URL is a bad answer of the model's).
_KINDS = {"bad_url": "bad_answer", "public_address": "refused_host", "unresolvable": "unreachable"}


def _host(url: str) -> str:
    return urlsplit(url).hostname or url
