"""The dashboard in headless Chromium (Debian's package, driven by Playwright): log in, see a real
turn in the latency plot, take screenshots, and check that nothing was requested off the device."""

from __future__ import annotations

import asyncio
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance.admin.daemon import engine_states, llm_load
from appliance.admin.protocol import ConnectionLimits
from appliance.admin.server import bind_socket, serve
from appliance.admin.tls import AdminTls
from appliance.audio import MemorySink
from appliance.audio.files import wav_file_source
from appliance.config import load_settings
from appliance.engine_set import session_config
from appliance.pipeline.engines import SessionEngines
from appliance.pipeline.oneshot import one_turn
from appliance.trace import TurnTrace
from appliance.trace.labels import SessionKind, SessionState
from tests.conftest import REPO
from tests.fixtures.admin import (
    ADMIN_PASSWORD,
    ADMIN_USER,
    VIEWER_PASSWORD,
    VIEWER_USER,
    AdminEnv,
    recorded_turn,
)

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = REPO / "test-artifacts"
QUESTION = "speech/en/speechbrain_spk1_snt3.wav"  # "AT THAT HIGH LEVEL THE AIR IS PURE"
LOCAL_SCHEMES = ("data:", "blob:", "about:")

playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the dev extra")


class ServerThread:
    """The admin app on an event loop of its own thread, as the daemon's loop would run it."""

    def __init__(self, env: AdminEnv, *, app: Any = None, tls: AdminTls | None = None) -> None:
        self.sock = bind_socket("127.0.0.1", 0)
        self.tls = tls or AdminTls()
        self.app = app or env.app
        self.base_url = f"{self.tls.scheme}://127.0.0.1:{self.sock.getsockname()[1]}"
        self.loop = asyncio.new_event_loop()
        self.started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(env,), daemon=True)
        self.task: asyncio.Task[None] | None = None

    def _run(self, env: AdminEnv) -> None:
        asyncio.set_event_loop(self.loop)
        ready = asyncio.Event()

        async def main() -> None:
            self.task = asyncio.create_task(
                serve(
                    self.app,
                    "127.0.0.1",
                    0,
                    limits=ConnectionLimits.of(env.settings.admin),
                    sock=self.sock,
                    started=ready,
                    tls=self.tls,
                )
            )
            await ready.wait()
            self.started.set()
            await asyncio.gather(self.task, return_exceptions=True)

        self.loop.run_until_complete(main())
        self.loop.close()

    def __enter__(self) -> ServerThread:
        self.thread.start()
        assert self.started.wait(20), "the admin page did not start"
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.task is not None:
            self.loop.call_soon_threadsafe(self.task.cancel)
        self.thread.join(20)


@pytest.fixture
def server(admin_env: AdminEnv) -> Iterator[ServerThread]:
    with ServerThread(admin_env) as running:
        yield running


@pytest.fixture
def browser() -> Iterator[object]:
    if not CHROMIUM.exists() or shutil.which("chromium") is None:
        pytest.fail("Debian's chromium is missing: apt-get install -y chromium (scripts/setup does it)")
    with playwright_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def logged_in(
    browser: Any, base_url: str, user: str, password: str, requested: list[str], **context_args: Any
) -> tuple[Any, Any]:
    """A new browser context logged in as ``user`` (every URL it asks for recorded): (context, page)."""
    context = browser.new_context(**context_args)
    context.on("request", lambda request: requested.append(request.url))
    page = context.new_page()
    page.goto(f"{base_url}/login")
    page.fill("#username", user)
    page.fill("#password", password)
    page.click("#login-button")
    return context, page


def _real_turn(env: AdminEnv, engines: SessionEngines, data_dir: Path) -> None:
    """One turn through the real pipeline (Silero, Whisper, Qwen, Piper), recorded in the store."""
    env.registry.open_session("mic", SessionKind.MICROPHONE)
    env.registry.update_session("mic", state=SessionState.LISTENING)
    source = wav_file_source(data_dir / QUESTION, realtime=True)
    sink = MemorySink(engines.tts.sample_rate_hz)
    result: list[object] = []

    def run() -> None:  # Playwright's sync API owns this thread's event loop
        turn = one_turn(
            engines,
            source,
            sink,
            config=session_config(load_settings(None)),
            store=env.store,
            session_id="mic",
        )
        try:
            result.append(asyncio.run(asyncio.wait_for(turn, 300)))
        except BaseException as err:  # reported below, on the test's thread
            result.append(err)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(320)
    (trace,) = result
    assert isinstance(trace, TurnTrace) and trace.error is None, trace
    env.registry.update_session("mic", state=SessionState.IDLE, turn_done=True)


def _page_labels(name: str) -> dict[str, str]:
    """A label map of the page's script (``const ENDED_BY = {smart_turn: "sounded finished", ...}``)."""
    script = (Path(__file__).resolve().parents[1] / "appliance/admin/static/app.js").read_text()
    found = re.search(rf"const {name} = \{{(.*?)\}};", script, re.S)
    assert found is not None, name
    return dict(re.findall(r'(\w+): "([^"]*)"', found[1]))


def test_dashboard_logs_in_and_plots_a_real_turn_from_the_device_only(
    admin_env: AdminEnv, server: ServerThread, browser: object, real_engines: SessionEngines, data_dir: Path
) -> None:
    for state in engine_states(admin_env.settings):
        admin_env.registry.set_engine(state)
    admin_env.registry.watch_llm(lambda: llm_load(real_engines.llm.occupancy()))
    context = browser.new_context(viewport={"width": 1280, "height": 1000})  # type: ignore[attr-defined]
    requested: list[str] = []
    console_errors: list[str] = []
    context.on("request", lambda request: requested.append(request.url))
    page = context.new_page()
    page.on(
        "console", lambda message: console_errors.append(message.text) if message.type == "error" else None
    )

    page.goto(f"{server.base_url}/")
    page.wait_for_url(f"{server.base_url}/login")
    page.fill("#username", ADMIN_USER)
    page.fill("#password", "not the password")
    page.click("#login-button")
    page.wait_for_selector("#login-error:not([hidden])")
    assert "wrong user name or password" in page.inner_text("#login-error")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "admin-login.png"))
    page.fill("#password", ADMIN_PASSWORD)
    page.click("#login-button")
    page.wait_for_url(f"{server.base_url}/")
    page.wait_for_selector("#health.ok")  # (the page's CSP forbids evaluated strings: selectors only)
    assert "ready" in page.inner_text("#health")
    assert page.inner_text("#whoami") == f"{ADMIN_USER} (admin)"
    assert page.locator("#latency-plot polyline").count() == 0  # no turn yet

    _real_turn(admin_env, real_engines, data_dir)

    # The page polls: the new turn appears without a reload.
    page.wait_for_selector(
        "#latency-plot polyline[data-stage='turn_latency']", state="attached", timeout=30_000
    )
    assert page.locator("#latency-plot circle").first.is_visible()  # one turn: one dot per stage
    page.wait_for_selector("#turns-table tbody tr[data-turn-id]")
    row = page.inner_text("#turns-table tbody tr[data-turn-id]").lower()
    assert "high level" in row or "air is pure" in row, row
    turn = admin_env.store.recent(1)[0]
    ended = _page_labels("ENDED_BY")  # whatever ended it (on a busy machine the audio's end may)
    assert ended.get(turn.endpoint_by, turn.endpoint_by or "?").lower() in row, (turn.endpoint_by, row)
    if turn.words_complete_p is not None:  # both verdicts are shown beside what ended the turn
        assert f"words {turn.words_complete_p:.2f}" in row, row
    assert "checks" in page.inner_text("#turn-incomplete") or turn.turn_checks == 0
    stages_drawn = page.eval_on_selector_all(
        "#latency-plot polyline", "lines => lines.map(l => l.dataset.stage)"
    )
    assert {"asr", "llm_first_token", "tts_first_audio", "turn_latency"} <= set(stages_drawn)
    if (turn.stage_s("turn_latency") or 0.0) * 1000 > admin_env.settings.trace.budget_ms:
        assert page.locator("#turns-table tr.over").count() == 1
        assert page.locator("#latency-plot circle.over-mark").count() == 1
    assert "turn_latency" in page.inner_text("#stage-table")
    assert page.inner_text("#session-count") == "1"
    slots = real_engines.llm.occupancy().slots
    assert page.inner_text("#llm-load").startswith(f"0 of {slots} answering · 0 waiting")
    save = page.locator("form[data-section='trace'] button[type=submit]")
    assert save.get_attribute("hidden") is None  # the admin may change settings

    page.screenshot(path=str(ARTIFACTS / "admin-dashboard.png"), full_page=True)
    assert (ARTIFACTS / "admin-dashboard.png").stat().st_size > 10_000

    # The admin raises the budget from the page: written to the file, in effect at the next refresh.
    page.click("details[data-section='trace'] summary")
    page.fill(".setting[data-key='trace.budget_ms'] input", "60000")
    assert "ms" in page.inner_text(".setting[data-key='trace.budget_ms'] .about")
    page.click("form[data-section='trace'] button[type=submit]")
    page.wait_for_selector("form[data-section='trace'] .result:has-text('In effect now: trace.budget_ms')")
    assert "budget_ms = 60000" in admin_env.config_path.read_text()
    page.wait_for_selector("#latency-plot text:has-text('budget 60000 ms')")
    still_over = (turn.stage_s("turn_latency") or 0.0) * 1000 > 60000
    assert page.locator("#turns-table tr.over").count() == int(still_over)

    # The API page renders from the device's own copy of Swagger UI.
    page.goto(f"{server.base_url}/docs")
    page.wait_for_selector(".swagger-ui .opblock", timeout=30_000)
    assert page.locator(".swagger-ui .opblock").count() >= 10
    page.screenshot(path=str(ARTIFACTS / "admin-api-docs.png"))

    context.close()

    # A turn whose reply was cut by the grounding check shows what was not said, and why.
    grounded = recorded_turn(transcript="how much is parking")
    grounded.played_reply = "Sorry, I don't have that information here."
    grounded.withheld = [{"clause": "Parking is 5 euros.", "why": "figure", "figures": ["5"]}]
    grounded.declined, grounded.facts_given = True, ["Parking"]
    grounded.overlaps = [  # a stop word only the linear canceller's output let the VAD hear
        {
            "kind": "stop_word",
            "heard": "wait",
            "heard_logprob": -0.2,
            "at_s": 2.4,
            "voiced_ms": 320,
            "silenced_ms": 64.0,
            "decided_ms": 540.0,
            "by_linear_ear": True,
        }
    ]
    admin_env.store.add(grounded)

    # A viewer sees the same page without the settings form.
    viewer, viewer_page = logged_in(browser, server.base_url, VIEWER_USER, VIEWER_PASSWORD, requested)
    viewer_page.wait_for_selector("#turns-table tbody tr[data-turn-id]")
    assert viewer_page.inner_text("#whoami") == f"{VIEWER_USER} (viewer)"
    assert (
        viewer_page.locator("form[data-section='trace'] button[type=submit]").get_attribute("hidden")
        is not None
    )
    viewer_page.wait_for_selector("#turns-table td:has-text('not said: 5 (a figure no source gave)')")
    assert "facts: Parking" in viewer_page.inner_text("#turns-table")
    assert 'over it at 2.4 s: "wait" (stopped, heard through the echo)' in viewer_page.inner_text(
        "#turns-table"
    )
    viewer.close()

    assert requested, "no request was seen"
    outside = [url for url in requested if not url.startswith((server.base_url + "/", *LOCAL_SCHEMES))]
    assert outside == [], f"requests left the device: {outside}"
    assert not [e for e in console_errors if "Content Security Policy" in e], console_errors
