"""A test site for the tools benchmark and tests: its tools (a facts file, a line status service on the
LAN, the device), the service on loopback as an HTTP server in a thread, and a JSON answer helper."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
FACTS = REPO / "tests" / "fixtures" / "site" / "facts.md"  # the test site's facts file


def site_agent(port: int) -> dict[str, object]:
    """The ``[agent]`` section of the test site, its line status service on 127.0.0.1:``port``."""
    return {
        "site_name": "the Northgate plant",
        "tools": [
            {
                "name": "site_facts",
                "kind": "facts",
                "description": "the site's facts: canteen hours, first aid, parking, shifts, torque specs, "
                "lost property",
                "file": str(FACTS),
            },
            {
                "name": "line_status",
                "kind": "http",
                "description": "whether a production line is running or stopped, by its number",
                "spoken_name": "the line status system",
                "url": f"http://127.0.0.1:{port}/lines/{{line}}",
                "parameters": {"line": {"type": "integer", "description": "the line number"}},
                "keep": ["status", "since"],
            },
            {"name": "device_status", "kind": "device", "description": "the current time and today's date"},
        ],
        "allowed_hosts": ["127.0.0.1"],
    }


async def one_turn(engines: Any, settings: Any, audio: np.ndarray) -> Any:
    """``audio`` (16 kHz) said to a session in real time; the trace of the turn that heard words."""
    from appliance.audio import ArraySource, MemorySink
    from appliance.engine_set import session_config
    from appliance.pipeline.session import Session

    traces: list[Any] = []
    session = Session(
        engines=engines,
        source=ArraySource(audio, realtime=True),
        sink=MemorySink(22050),
        config=session_config(settings),
        on_turn=traces.append,
    )
    await session.run(max_turns=1)
    return next((t for t in traces if t.transcript), None)


@contextlib.contextmanager
def serve_http(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[int]:
    """``handler`` served on 127.0.0.1 in a thread while the block runs; yields the port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def send(
    handler: http.server.BaseHTTPRequestHandler, body: object, *, status: int = 200, content_type: str = ""
) -> None:
    """Answer ``body`` (JSON unless it is bytes) with ``status``; a client that stops reading (a huge
    answer cut short) is not an error."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header(
        "Content-Type", content_type or ("text/plain" if isinstance(body, bytes) else "application/json")
    )
    handler.send_header("Content-Length", str(len(raw)))
    handler.end_headers()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        handler.wfile.write(raw)
