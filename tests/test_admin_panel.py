"""The control panel in headless Chromium, as a technician meets it: every section drawn from the
settings' schema, a bad value refused with the message `appliance config check` gives, a change that
needs a restart saved (the file's comments kept) with the restart button, the facts file edited, and a
question tried through the daemon's own answer path (Qwen 1.5B choosing the site's sentence)."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from appliance.config import ConfigError, Settings, load_settings, override
from appliance.config_writer import BACKUP_SUFFIX
from appliance.daemon.load import Daemon
from appliance.daemon.panel import panel_hooks
from appliance.engine_set import session_config
from appliance.pipeline.engines import SessionEngines
from appliance.service.notify import Notifier
from appliance.service.runner import ServiceControl
from engines.asr import AsrEngine
from engines.bundle import Bundle
from engines.tts import TtsEngine
from engines.vad import VadEngine
from tests.fixtures.admin import ADMIN_PASSWORD, ADMIN_USER, VIEWER_PASSWORD, VIEWER_USER, make_admin_env
from tests.test_admin_browser import LOCAL_SCHEMES, ServerThread, browser, logged_in  # noqa: F401 (a fixture)
from tests.test_agent_tools import site_llm

PLANT = Path(__file__).parent / "fixtures" / "site" / "plant.md"
WRITTEN_BY_HAND = """\
# Eastfield kiosk, set up by the site's technician
[agent]
site_name = "the Eastfield works"  # as on the gate

[[agent.tools]]
name = "site_facts"
kind = "facts"
description = "the site's facts"
file = "{facts}"

[llm]
model = "qwen-1.5b"
context_tokens = 1024
"""


@pytest.fixture(scope="module")
def plant_engines(
    bundle: Bundle, vad_onnx: VadEngine, pipeline_asr: AsrEngine, piper_tts: TtsEngine, tmp_path_factory: Any
) -> Iterator[tuple[Settings, SessionEngines]]:
    facts = tmp_path_factory.mktemp("site") / "facts.md"
    shutil.copyfile(PLANT, facts)
    tool = {"name": "site_facts", "kind": "facts", "description": "the site's facts", "file": str(facts)}
    agent = {"site_name": "the Eastfield works", "tools": [tool]}
    settings = override(load_settings(None), agent=agent, llm={"model": "qwen-1.5b", "context_tokens": 1024})
    for llm, box in site_llm(settings, bundle):
        yield (
            settings,
            SessionEngines.create(vad=vad_onnx, asr=pipeline_asr, llm=llm, tts=piper_tts, tools=box),
        )


def _schema_message(key: str, value: object, tmp_path: Path) -> str:
    """What `appliance config check` says of ``key = value``."""
    section, name = key.split(".")
    probe = tmp_path / "probe.toml"
    probe.write_text(f"[{section}]\n{name} = {value}\n")
    with pytest.raises(ConfigError) as refused:
        load_settings(probe)
    (problem,) = [p for p in refused.value.problems if p.key == key]
    return problem.message


def test_the_control_panel_edits_settings_and_facts_and_tries_a_question(
    tmp_path: Path,
    admin_users_file: Path,
    plant_engines: tuple[Settings, SessionEngines],
    browser: object,  # noqa: F811
) -> None:
    settings, engines = plant_engines
    env = make_admin_env(tmp_path, settings, admin_users_file)
    facts = settings.agent.tools[0].file
    assert facts is not None
    env.config_path.write_text(WRITTEN_BY_HAND.format(facts=facts))
    control = ServiceControl(Notifier())
    daemon = cast(Daemon, SimpleNamespace(engines=engines, sessions=set()))

    with ServerThread(env) as server:

        async def hooks() -> Any:  # made on the loop that serves the page, as the daemon makes them
            return panel_hooks(daemon, session_config(settings), control)

        env.backend.hooks = asyncio.run_coroutine_threadsafe(hooks(), server.loop).result(10)
        requested: list[str] = []
        viewport = {"width": 1280, "height": 1000}
        context, page = logged_in(
            browser, server.base_url, ADMIN_USER, ADMIN_PASSWORD, requested, viewport=viewport
        )
        page.wait_for_selector("#config-panel details[data-section='trace']")
        assert page.locator("#config-panel details.setting-section").count() == len(Settings.model_fields)

        # Each setting with its description, unit, bounds and default; a bad value refused with the message
        # of `appliance config check`, marked at the setting, nothing written.
        page.click("details[data-section='llm'] summary")
        temperature = page.locator(".setting[data-key='llm.temperature']")
        about = temperature.inner_text()
        assert "sampling temperature" in about and "≥ 0" in about and "≤ 2" in about and "default 0" in about
        assert "applies after a restart" in about
        before = env.config_path.read_text()
        temperature.locator("input").fill("5")
        page.click("form[data-section='llm'] button[type=submit]")
        page.wait_for_selector(".setting.problem[data-key='llm.temperature'] .message")
        shown = page.inner_text(".setting.problem[data-key='llm.temperature'] .message")
        assert shown.startswith(_schema_message("llm.temperature", 5, tmp_path)), shown
        assert env.config_path.read_text() == before

        # A change that needs a restart: saved into the file as written, the restart button offered.
        temperature.locator("input").fill("0.3")
        page.click("form[data-section='llm'] button[type=submit]")
        page.wait_for_selector("#restart-bar:not([hidden])")
        assert "llm.temperature" in page.inner_text("#restart-text")
        assert env.config_path.read_text() == before.replace(
            "context_tokens = 1024\n", "context_tokens = 1024\ntemperature = 0.3\n"
        )
        assert (env.config_path.parent / (env.config_path.name + BACKUP_SUFFIX)).read_text() == before

        # The facts file, edited on the page: checked as the answer path reads it, the old one kept.
        area = page.locator("form.facts-file[data-tool='site_facts'] textarea")
        assert "The M8 bolts on line 2 are tightened to 25 newton metres." in area.input_value()
        area.fill(area.input_value() + "\n# Guest wifi\nThe guest wifi network is Eastfield-Guest.\n")
        page.click("form.facts-file[data-tool='site_facts'] button[type=submit]")
        page.wait_for_selector("form.facts-file .result:has-text('Saved')")
        assert "Eastfield-Guest" in facts.read_text()
        assert "Eastfield-Guest" not in facts.with_name(facts.name + BACKUP_SUFFIX).read_text()

        # A question tried: answered by the model choosing the site's own sentence, as the kiosk would.
        page.fill("#try-question", "What torque do the M8 bolts on line 2 need?")
        page.click("#try-form button[type=submit]")
        page.wait_for_selector("#try-result:has-text('newton metres')", timeout=120_000)
        said = page.inner_text("#try-result")
        assert "25 newton metres" in said and "chose entry" in said, said

        # The restart button: the daemon is asked to start again once no call is in progress.
        page.click("#restart")
        page.wait_for_selector("#restart-text:has-text('Restarting')")
        deadline = time.monotonic() + 10
        while not control.restart_requested and time.monotonic() < deadline:
            time.sleep(0.1)
        assert control.restart_requested
        context.close()

        # A viewer reads the panel but has nothing to save or ask with.
        viewer, viewer_page = logged_in(browser, server.base_url, VIEWER_USER, VIEWER_PASSWORD, requested)
        viewer_page.wait_for_selector("#config-panel details[data-section='trace']")
        viewer_page.wait_for_selector("form.facts-file[data-tool='site_facts']")
        for save in ("form[data-section='llm'] button[type=submit]", "form.facts-file button[type=submit]"):
            assert viewer_page.locator(save).get_attribute("hidden") is not None, save
        assert viewer_page.locator(".setting[data-key='llm.temperature'] input").is_disabled()
        assert viewer_page.locator("#try-form").is_hidden()
        viewer.close()
    env.store.close()
    outside = [url for url in requested if not url.startswith((server.base_url + "/", *LOCAL_SCHEMES))]
    assert outside == [], f"requests left the device: {outside}"
