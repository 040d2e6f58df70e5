"""The read API (status, sessions, turns, latency, configuration), health probes and /metrics.

Handlers are plain functions: FastAPI runs them in worker threads, so SQLite reads and /proc never
block the daemon's event loop.
"""

from __future__ import annotations

from pathlib import Path as PathType
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from appliance.admin.backend import AdminBackend, ConfigNotWritable, NotAvailable
from appliance.admin.errors import ApiError
from appliance.admin.facts_files import FactsNotFound
from appliance.admin.metrics import TraceMetrics
from appliance.admin.schemas import (
    ConfigChange,
    ConfigUpdate,
    ConfigView,
    ErrorBody,
    FactsChange,
    FactsFileView,
    FactsSaved,
    Health,
    LatencyReport,
    LiveSession,
    Readiness,
    Restarting,
    SettingsSection,
    StatusReport,
    TriedAnswer,
    TryQuestion,
    TurnView,
)
from appliance.admin.security import current_login, metrics_access, require_admin
from appliance.admin.views import latency_report, turn_view
from appliance.config import ConfigError
from appliance.tools.facts import FactsFileError

MAX_TURNS_LISTED = 1000
MAX_TURNS_SUMMARIZED = 10_000
_AUTH_ERRORS: dict[int | str, dict[str, object]] = {401: {"model": ErrorBody}, 422: {"model": ErrorBody}}


def backend_of(request: Request) -> AdminBackend:
    backend: AdminBackend = request.app.state.backend
    return backend


BackendDep = Annotated[AdminBackend, Depends(backend_of)]


def probe_router() -> APIRouter:
    router = APIRouter(tags=["health"])

    @router.get("/healthz", response_model=Health)
    async def healthz(backend: BackendDep) -> Health:
        """Liveness: the daemon's event loop answers (this handler runs on it)."""
        return backend.health()

    @router.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}})
    def readyz(backend: BackendDep) -> JSONResponse:
        """Readiness: every engine loaded and warmed up (503 until then)."""
        readiness = backend.readiness()
        return JSONResponse(readiness.model_dump(mode="json"), status_code=200 if readiness.ready else 503)

    return router


def metrics_router(metrics: TraceMetrics, *, public: bool, token_file: PathType | None = None) -> APIRouter:
    access = [] if public else [Depends(metrics_access(token_file))]
    router = APIRouter(tags=["health"], dependencies=access)

    @router.get(
        "/metrics",
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}, **({} if public else _AUTH_ERRORS)},
    )
    def prometheus_metrics() -> Response:
        """Prometheus text format: per-stage latency histograms, turn counters, readiness."""
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    return router


def api_router() -> APIRouter:
    router = APIRouter(prefix="/api", dependencies=[Depends(current_login)], responses=_AUTH_ERRORS)

    @router.get("/status", response_model=StatusReport, tags=["status"])
    def status(backend: BackendDep) -> StatusReport:
        """Engines and versions, the bundle manifest, uptime, CPU/RAM/disk, GPU and temperatures."""
        return backend.status()

    @router.get("/sessions", response_model=list[LiveSession], tags=["status"])
    def sessions(backend: BackendDep) -> list[LiveSession]:
        """Open audio sessions: the microphone and each SIP call."""
        return backend.sessions()

    @router.get("/turns", response_model=list[TurnView], tags=["turns"])
    def turns(
        backend: BackendDep,
        limit: Annotated[int, Query(ge=1, le=MAX_TURNS_LISTED, description="newest turns to return")] = 50,
    ) -> list[TurnView]:
        """Recent turns, newest first, with every trace timestamp and stage duration."""
        budget = backend.budget_ms()
        return [turn_view(t, budget) for t in backend.recent_traces(limit)]

    @router.get(
        "/turns/{turn_id}", response_model=TurnView, tags=["turns"], responses={404: {"model": ErrorBody}}
    )
    def turn(
        turn_id: Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{1,64}$")],
        backend: BackendDep,
    ) -> TurnView:
        """One turn by id (among the stored ones)."""
        for trace in backend.recent_traces(MAX_TURNS_SUMMARIZED):
            if trace.turn_id == turn_id:
                return turn_view(trace, backend.budget_ms())
        raise ApiError(
            404, "not_found", f"no stored turn {turn_id!r} (old turns are dropped beyond trace.max_turns)"
        )

    @router.get("/latency", response_model=LatencyReport, tags=["turns"])
    def latency(
        backend: BackendDep,
        limit: Annotated[
            int, Query(ge=1, le=MAX_TURNS_SUMMARIZED, description="newest turns to summarize")
        ] = 200,
    ) -> LatencyReport:
        """p50/p95/p99 of each stage over recent turns, against the latency budget."""
        return latency_report(backend.recent_traces(limit), backend.budget_ms())

    @router.get("/config", response_model=ConfigView, tags=["configuration"])
    def config(backend: BackendDep) -> ConfigView:
        """The settings in effect, where they come from, and which keys apply without a restart."""
        return backend.config()

    @router.put(
        "/config",
        response_model=ConfigUpdate,
        tags=["configuration"],
        dependencies=[Depends(require_admin)],
        responses={403: {"model": ErrorBody}, 409: {"model": ErrorBody}},
    )
    def update_config(change: ConfigChange, backend: BackendDep) -> ConfigUpdate:
        """Change settings (admin role, CSRF header): validated, written atomically; the answer says which
        keys are in effect now and which need a restart."""
        try:
            return backend.update_config(change.changes)
        except ConfigNotWritable as err:
            raise ApiError(409, "config_read_only", str(err)) from err
        except ConfigError as err:
            listed = "; ".join(str(p) for p in err.problems)
            problems = [{"key": p.key, "message": str(p).removeprefix(f"{p.key}: ")} for p in err.problems]
            raise ApiError(
                422, "invalid_config", f"nothing was written: {listed}", problems=problems
            ) from err
        except ValueError as err:
            raise ApiError(422, "invalid_config", f"nothing was written: {err}") from err
        except OSError as err:
            raise ApiError(409, "config_write_failed", f"cannot write the configuration file: {err}") from err

    panel_routes(router)
    return router


def panel_routes(router: APIRouter) -> None:
    """The control panel: the settings' schema, the facts files, a question tried, a restart."""

    @router.get("/config/schema", response_model=list[SettingsSection], tags=["configuration"])
    def config_schema(backend: BackendDep) -> list[SettingsSection]:
        """Every setting by section: description, unit, bounds, choices, default, whether it applies now."""
        return backend.config_schema()

    @router.get("/facts", response_model=list[FactsFileView], tags=["facts"])
    def facts(backend: BackendDep) -> list[FactsFileView]:
        """The site's facts files (one per facts tool) with their text."""
        return backend.facts()

    @router.put(
        "/facts/{tool}",
        response_model=FactsSaved,
        tags=["facts"],
        dependencies=[Depends(require_admin)],
        responses={403: {"model": ErrorBody}, 404: {"model": ErrorBody}},
    )
    def save_facts(
        change: FactsChange, backend: BackendDep, tool: Annotated[str, Path(max_length=64)]
    ) -> FactsSaved:
        """Replace a facts tool's file (admin role, CSRF header); checked as the answer path reads it,
        the file before kept as FILE.bak; in service after a restart."""
        try:
            return backend.save_facts(tool, change.text)
        except FactsNotFound as err:
            raise ApiError(404, "no_such_facts", str(err)) from err
        except FactsFileError as err:
            raise ApiError(422, "invalid_facts", f"nothing was written: {err}") from err
        except OSError as err:
            raise ApiError(409, "facts_write_failed", f"cannot write the facts file: {err}") from err

    @router.post(
        "/facts/try",
        response_model=TriedAnswer,
        tags=["facts"],
        dependencies=[Depends(require_admin)],
        responses={403: {"model": ErrorBody}, 409: {"model": ErrorBody}},
    )
    def try_question(asked: TryQuestion, backend: BackendDep) -> TriedAnswer:
        """A typed question answered as the kiosk answers it now (the facts in service)."""
        try:
            return backend.try_question(asked.question)
        except NotAvailable as err:
            raise ApiError(409, "not_available", str(err)) from err

    @router.post(
        "/restart",
        response_model=Restarting,
        tags=["configuration"],
        dependencies=[Depends(require_admin)],
        responses={403: {"model": ErrorBody}, 409: {"model": ErrorBody}},
    )
    def restart(backend: BackendDep) -> Restarting:
        """Start the daemon again once no call is in progress (settings and facts that need it)."""
        try:
            return backend.restart()
        except NotAvailable as err:
            raise ApiError(409, "not_available", str(err)) from err
