"""An HTTP call to a service on the site's LAN: the one exception to the air gap, and only to the hosts
listed in ``agent.allowed_hosts`` (checked before any connection; no redirects followed)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote, urlsplit

from engines.net import host_allowed, name_lookup_allowed

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
    """(content type, decoded answer: JSON when it is JSON, else text) of one request."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ToolFailed("bad_answer", f"{url!r} is not an http(s) URL")
    if not host_allowed(parts.hostname, allowed_hosts):
        raise ToolFailed("refused_host", f"{parts.hostname} is not in agent.allowed_hosts")
    connection_type = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = connection_type(parts.hostname, parts.port, timeout=timeout_s)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    payload = json.dumps(body).encode() if body is not None else None
    headers = {"Accept": "application/json, text/plain", "User-Agent": "voice-appliance"}
    if payload is not None:
        headers["Content-Type"] = "application/json"
    try:
        with name_lookup_allowed(parts.hostname):  # listed in agent.allowed_hosts, checked above
            connection.request(method, path, body=payload, headers=headers)
        response = connection.getresponse()
        raw = response.read(MAX_BODY_BYTES)
    except TimeoutError as err:
        raise ToolFailed("timeout", f"{parts.hostname} did not answer within {timeout_s:g} s") from err
    except (OSError, http.client.HTTPException) as err:
        raise ToolFailed("unreachable", f"{parts.hostname}: {err}") from err
    finally:
        connection.close()
    if not 200 <= response.status < 300:
        raise ToolFailed("http_status", f"{parts.hostname} answered HTTP {response.status}")
    content_type = response.getheader("Content-Type", "") or ""
    text = raw.decode("utf-8", errors="replace")
    if "json" in content_type:
        try:
            return content_type, json.loads(text)
        except json.JSONDecodeError:
            return content_type, text  # cut short at MAX_BODY_BYTES, or not JSON after all: as text
    return content_type, text
