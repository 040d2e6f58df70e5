"""The daemon's admin backend: the turn trace store, the configuration file, engine and session state."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

from appliance import __version__
from appliance.admin.backend import ConfigNotWritable, LiveRegistry, NotAvailable
from appliance.admin.config_file import apply_changes, environment_overrides
from appliance.admin.config_schema import settings_sections
from appliance.admin.facts_files import facts_files, save_facts
from appliance.admin.schemas import (
    BundleSummary,
    ConfigUpdate,
    ConfigView,
    FactsFileView,
    FactsSaved,
    Health,
    LiveSession,
    LlmLoad,
    Readiness,
    Restarting,
    SettingsSection,
    StatusReport,
    TriedAnswer,
)
from appliance.admin.system import HostProbe
from appliance.config import Settings, load_settings
from appliance.daemon.start_check import check_start
from appliance.trace import TraceStore, TurnTrace

log = logging.getLogger(__name__)

# Installed runtime packages shown on the status page (versions from package metadata, no imports).
RUNTIME_PACKAGES = (
    "onnxruntime",
    "onnxruntime-gpu",
    "tensorrt",
    "llama-cpp-python",
    "piper-tts",
    "ctranslate2",
    "torch",
    "silero-vad",
    "numpy",
)

# Keys the admin page applies itself; the daemon adds the ones it can apply without a restart.
ADMIN_LIVE_KEYS = frozenset({"trace.budget_ms"})

ApplyHook = Callable[[Settings, list[str]], None]


@dataclass(frozen=True)
class PanelHooks:
    """What only the daemon can do for the control panel, called from the page's worker threads:
    ``ask(question)`` answers through the daemon's own answer path; ``restart()`` starts the daemon
    again once no call is in progress and says when."""

    ask: Callable[[str], TriedAnswer] | None = None
    restart: Callable[[], str] | None = None


@functools.lru_cache(maxsize=4)
def runtime_versions(packages: tuple[str, ...] = RUNTIME_PACKAGES) -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in packages:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


class LocalBackend:
    """``AdminBackend`` over the daemon's own state.

    ``bundle`` is the daemon's summary of the engine bundle it opened. ``config_path`` is the file the
    daemon was started with (None: the shipped default, read-only).
    ``live_keys`` are keys the daemon applies without a restart; ``on_apply(settings, keys)`` is called
    (from a worker thread) after a write that changed any of them.
    """

    def __init__(
        self,
        settings: Settings,
        store: TraceStore,
        registry: LiveRegistry,
        bundle: BundleSummary,
        *,
        config_path: Path | None = None,
        live_keys: Iterable[str] = (),
        on_apply: ApplyHook | None = None,
        started_at: float | None = None,
        notice: str | None = None,
        hooks: PanelHooks | None = None,
        certificate: str | None = None,
    ) -> None:
        self._settings = settings
        self.store = store
        self.registry = registry
        self.config_path = config_path
        self.live_keys = frozenset(live_keys) | ADMIN_LIVE_KEYS
        self._on_apply = on_apply
        # The daemon's uptime: from the process start unless told otherwise.
        self.started_at = psutil.Process().create_time() if started_at is None else started_at
        self._started_monotonic = time.monotonic() - (time.time() - self.started_at)
        self._probe = HostProbe(settings.trace.db_path.parent)
        self._runtimes = dict(runtime_versions())
        self._bundle = bundle  # the daemon's summary of the bundle it opened
        self._notice = notice  # e.g. running on the last configuration that started
        self._config_lock = threading.Lock()
        self.certificate = certificate  # the page's TLS fingerprint, shown in its footer
        self.hooks = hooks or PanelHooks()  # the daemon's own (public: set once the loop runs)

    @property
    def settings(self) -> Settings:
        return self._settings

    def uptime_s(self) -> float:
        return round(time.monotonic() - self._started_monotonic, 3)

    def health(self) -> Health:
        return Health(uptime_s=self.uptime_s())

    def readiness(self) -> Readiness:
        engines = self.registry.engines()
        waiting = [e.name for e in engines if not (e.loaded and e.warm)]
        return Readiness(ready=bool(engines) and not waiting, engines=engines, waiting_for=waiting)

    def status(self) -> StatusReport:
        readiness = self.readiness()
        return StatusReport(
            version=__version__,
            site_name=self._settings.agent.site_name,
            device_id=self._settings.agent.device_id,
            started_at=self.started_at,
            uptime_s=self.uptime_s(),
            ready=readiness.ready,
            engines=readiness.engines,
            runtimes=self._runtimes,
            bundle=self.registry.bundle() or self._bundle,
            host=self._probe.read(),
            notice=self._notices(),
            turns_not_stored=self.store.failed_writes,
            llm=self.llm_load(),
            sip_registration=self.registry.registration(),
            sip_events=self.registry.sip_events(),
            wake_words_heard=self.registry.wake_words_heard(),
            certificate=self.certificate,
        )

    def _notices(self) -> str | None:
        notices = [self._notice] if self._notice else []
        notices += self.registry.notices()
        if self.store.failed_writes:
            notices.append(
                f"{self.store.failed_writes} turn(s) could not be stored in {self.store.db_path} "
                f"({self.store.last_write_error}); they are missing from this page (fix: free disk space "
                "there, or point trace.db_path at a writable disk)"
            )
        return " · ".join(notices) or None

    def sessions(self) -> list[LiveSession]:
        return self.registry.sessions()

    def llm_load(self) -> LlmLoad | None:
        return self.registry.llm_load()

    def recent_traces(self, limit: int) -> list[TurnTrace]:
        return self.store.recent(limit)

    def budget_ms(self) -> float:
        return float(self._settings.trace.budget_ms)

    def turns_not_stored(self) -> int:
        return self.store.failed_writes

    def config(self) -> ConfigView:
        return ConfigView(
            path=str(self.config_path) if self.config_path else None,
            writable=self.config_path is not None,
            settings=self._settings.model_dump(mode="json"),
            environment_overrides=environment_overrides(),
            live_keys=sorted(self.live_keys),
        )

    def update_config(self, changes: dict[str, dict[str, Any]]) -> ConfigUpdate:
        if self.config_path is None:
            raise ConfigNotWritable(
                "the daemon runs on the shipped default configuration, which is read-only; "
                "start it with `appliance run --config FILE` to change settings here"
            )
        with self._config_lock:
            running = self._settings
            config_path = self.config_path
            _, changed = apply_changes(
                config_path,
                changes,
                machine_check=lambda new: check_start(new, config_path=config_path, running=running).all,
            )
            overridden = set(environment_overrides())
            effective = load_settings(self.config_path)
            live = [k for k in changed if k in self.live_keys and k not in overridden]
            if live:
                self._settings = _with_keys(self._settings, effective, live)
                if self._on_apply is not None:
                    self._on_apply(effective, live)
            log.info("configuration %s changed: %s", self.config_path, ", ".join(changed) or "nothing")
        return ConfigUpdate(
            path=str(self.config_path),
            changed=changed,
            applied=live,
            restart_required=[k for k in changed if k not in live and k not in overridden],
            environment_overrides=[k for k in changed if k in overridden],
        )

    def config_schema(self) -> list[SettingsSection]:
        return settings_sections(self.live_keys)

    def facts(self) -> list[FactsFileView]:
        return facts_files(self._settings)

    def save_facts(self, tool: str, text: str) -> FactsSaved:
        saved = save_facts(self._settings, tool, text)
        log.info("facts file %s replaced from the admin page (%d entries)", saved.path, saved.sections)
        return saved

    def try_question(self, question: str) -> TriedAnswer:
        if self.hooks.ask is None:
            raise NotAvailable("no engines answer here (the admin page runs without the daemon's pipeline)")
        return self.hooks.ask(question)

    def restart(self) -> Restarting:
        if self.hooks.restart is None:
            raise NotAvailable("this daemon cannot restart itself")
        return Restarting(restarting=True, message=self.hooks.restart())


def _with_keys(running: Settings, source: Settings, keys: list[str]) -> Settings:
    """``running`` with the values of ``keys`` (``section.key``) taken from ``source``."""
    sections: dict[str, Any] = {}
    for dotted in keys:
        section, key = dotted.split(".", 1)
        current = sections.get(section, getattr(running, section))
        sections[section] = current.model_copy(update={key: getattr(getattr(source, section), key)})
    return running.model_copy(update=sections)
