"""Loading the daemon before READY: the settings' engines and store (or the last good configuration,
or the previous bundle version, when they cannot start), and closing them after."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from pathlib import Path

from appliance.admin.schemas import BundleSummary
from appliance.config import Settings
from appliance.daemon.bundle_view import device_status, summarize_bundle
from appliance.daemon.start_plan import StartPlan
from appliance.engine_set import (
    build_engines,
    check_llm_runs,
    load_engines,
    open_bundle,
)
from appliance.pipeline.engines import SessionEngines
from appliance.pipeline.session import Session
from appliance.trace.store import TraceStore
from engines.bundle_store import BundleStore
from engines.errors import BundleError

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Daemon:
    """What ``serve`` needs, built by ``load`` before READY."""

    settings: Settings
    engines: SessionEngines
    store: TraceStore | None
    bundle: BundleSummary
    microphone: str | None  # device name when a microphone is used, else None
    no_microphone_reason: str
    load_seconds: dict[str, float]
    config_path: Path | None = None
    notice: str | None = None  # running degraded or on the last configuration that started, and why
    local_problem: str | None = None  # the local audio session does not run, and why
    sessions: set[Session] = dataclasses.field(default_factory=set)  # open now

    def serve_with(
        self, engines: SessionEngines, bundle: BundleSummary, load_seconds: dict[str, float]
    ) -> None:
        """New turns run on ``engines`` (a bundle version switched to); each session moves to them at
        its next quiet moment."""
        self.engines, self.bundle, self.load_seconds = engines, bundle, load_seconds
        _tell_device_status(engines)


def _tell_device_status(engines: SessionEngines) -> None:
    """The device tool answers with these engines' live state."""
    if engines.tools is not None:
        engines.tools.device_status = functools.partial(device_status, engines)


def open_store(settings: Settings, *, owner: bool = False) -> TraceStore | None:
    """The turn trace store, or None (with a warning) when it cannot be opened. ``owner``: the
    daemon's, which raises TurnDatabaseInUse when another daemon holds the database."""
    try:
        return TraceStore(settings.trace.db_path, max_turns=settings.trace.max_turns, owner=owner)
    except OSError as err:
        log.warning("turn trace not stored: %s", err)
        return None


def load(
    settings: Settings, *, microphone: str | None, no_microphone_reason: str, config_path: Path | None
) -> Daemon:
    """Blocking (runs on a worker thread before READY): the turn database claimed (before anything
    is loaded: a second daemon on it stops at once), bundle check, engines loaded and warmed."""
    store = open_store(settings, owner=True)
    try:
        bundle = open_bundle(settings, daemon_start=True)
        check_llm_runs(bundle)
        engines = build_engines(settings, bundle, microphone=microphone is not None)
    except BaseException:
        if store is not None:
            store.close()
        raise
    try:
        seconds = asyncio.run(_load_refusing_calls(settings, engines))
    except BaseException:
        asyncio.run(engines.close())
        if store is not None:
            store.close()
        raise
    _tell_device_status(engines)
    return Daemon(
        settings=settings,
        engines=engines,
        store=store,
        bundle=summarize_bundle(bundle),
        microphone=microphone,
        no_microphone_reason=no_microphone_reason,
        load_seconds=seconds,
        config_path=config_path,
    )


async def _load_refusing_calls(settings: Settings, engines: SessionEngines) -> dict[str, float]:
    """The engines loaded; meanwhile, with SIP on, the SIP port answers every INVITE and OPTIONS with
    503 and Retry-After, so that the site's proxy sends calls to another device (and the phone system
    hears "not yet" rather than nothing). The real listener takes the port once this returns."""
    placeholder = None
    if settings.sip.enabled:
        from appliance.sip.server import SipServer

        async def never(call: object) -> None:  # no call is accepted while loading
            return None

        placeholder = SipServer(settings.sip, never, accepting=False)
        try:
            await placeholder.start()
        except OSError as err:
            log.warning("SIP: cannot answer 503 while the engines load (%s)", err)
            placeholder = None
    try:
        return await load_engines(engines)
    finally:
        if placeholder is not None:
            await placeholder.stop()


def load_with_fallback(plan: StartPlan, *, config_path: Path | None) -> Daemon:
    """``load`` with what ``plan`` chose; when the engines cannot load with it, the last configuration
    that started (``appliance.daemon.last_good``), loudly. A plan already on that configuration (its notice
    says so) gets no second fallback. The microphone probed for the plan is kept."""
    from appliance.daemon import last_good
    from appliance.daemon.crash_guard import CrashGuard
    from engines.errors import EngineError

    crashed = CrashGuard.of(plan.settings.bundle).check()

    def started(chosen: Settings, why: str | None) -> Daemon:
        CrashGuard.of(chosen.bundle).started()
        daemon = load(
            chosen,
            microphone=plan.microphone,
            no_microphone_reason=plan.no_microphone_reason,
            config_path=config_path,
        )
        daemon.local_problem = plan.local_problem
        if why is not None:
            log.error("%s", why)
            daemon.notice = why
        return daemon

    try:
        daemon = started(plan.settings, _joined(plan.notice, crashed.notice if crashed else None))
    except EngineError as err:
        rolled = _roll_back_bundle(plan.settings, err)
        if rolled is not None:
            try:
                daemon = started(plan.settings, rolled.notice)
            except EngineError:
                rolled.undo()  # the previous version fails too: the bundle was not the problem
            else:
                daemon.bundle = daemon.bundle.model_copy(update={"rolled_back_from": rolled.failed})
                return daemon
        kept = None if plan.notice is not None else last_good.fallback(config_path, str(err))
        if kept is None:
            raise
        try:
            return started(*kept)
        except EngineError:
            raise err from None  # the kept configuration fails too: the file's own problem is the news
    if crashed is not None:
        daemon.bundle = daemon.bundle.model_copy(update={"rolled_back_from": crashed.failed})
    return daemon


def _joined(*notices: str | None) -> str | None:
    return "; ".join(n for n in notices if n) or None


@dataclasses.dataclass(frozen=True)
class _BundleRollback:
    store: BundleStore
    failed: str
    notice: str

    def undo(self) -> None:
        self.store.rollback()
        log.error("the previous bundle version fails to load too; %s is active again", self.failed)


def _roll_back_bundle(settings: Settings, err: Exception) -> _BundleRollback | None:
    """The engines cannot load from the active bundle version: where ``bundle.dir`` keeps versions and
    has a previous one, go back to it, loudly (journal, STATUS, the admin page's banner, /metrics)."""
    store = BundleStore(settings.bundle.dir)
    try:
        state = store.state()
        if not store.versioned or state.active is None or state.previous is None:
            return None
        store.rollback()
    except (BundleError, OSError):
        return None
    notice = (
        f"the engine bundle version {state.active} failed to load ({err}); rolled back to version "
        f"{state.previous} (appliance bundle list shows both)"
    )
    log.error("%s", notice)
    return _BundleRollback(store, state.active, notice)


def close(daemon: Daemon) -> None:
    asyncio.run(daemon.engines.close())
    if daemon.store is not None:
        daemon.store.close()
