"""``create_app``: the admin page as a FastAPI app, to be served on the daemon's own event loop."""

from __future__ import annotations

from fastapi import FastAPI

from appliance import __version__
from appliance.admin.backend import AdminBackend
from appliance.admin.errors import install_error_handlers
from appliance.admin.logins import LoginStore
from appliance.admin.metrics import TraceMetrics
from appliance.admin.middleware import HeadersAndLimits
from appliance.admin.ratelimit import LoginRateLimiter
from appliance.admin.routes_api import api_router, metrics_router, probe_router
from appliance.admin.routes_auth import auth_router
from appliance.admin.routes_pages import mount_static, page_router
from appliance.admin.schemas import ErrorBody
from appliance.admin.security import AuthContext
from appliance.admin.tls import AdminTls
from appliance.admin.users import UserDirectory
from appliance.config import Settings

# Everything the page loads comes from the device itself; the browser enforces it too.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
    "form-action 'self'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
}
MAX_BODY_BYTES = 64 * 1024


def create_app(
    backend: AdminBackend,
    settings: Settings,
    *,
    users: UserDirectory | None = None,
    metrics: TraceMetrics | None = None,
    tls: AdminTls | None = None,
) -> FastAPI:
    """The admin app over ``backend``; accounts from ``settings.admin`` unless ``users`` is given;
    served with ``tls``, its session cookie is Secure."""
    admin = settings.admin
    app = FastAPI(
        title="Voice appliance admin API",
        version=__version__,
        description="Status, latency and configuration of this device. Log in with POST /api/login.",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,  # served by page_router, behind the login, from local assets only
        responses={
            400: {"model": ErrorBody, "description": "a body that is not valid JSON"},
            413: {"model": ErrorBody, "description": f"a body over {MAX_BODY_BYTES} bytes"},
        },
    )
    app.state.backend = backend
    app.state.auth = AuthContext(
        logins=LoginStore(admin.session_ttl_s),
        users=users or UserDirectory(admin.users_file, admin.password_file),
        limiter=LoginRateLimiter(admin.login_max_failures, admin.login_window_s),
        cookie_secure=admin.cookie_secure or (tls is not None and tls.enabled),
    )
    app.state.metrics = metrics or TraceMetrics(backend)
    app.state.refresh_s = admin.refresh_s
    install_error_handlers(app)

    app.add_middleware(HeadersAndLimits, headers=SECURITY_HEADERS, max_body_bytes=MAX_BODY_BYTES)
    app.include_router(probe_router())
    app.include_router(
        metrics_router(app.state.metrics, public=admin.metrics_public, token_file=admin.metrics_token_file)
    )
    app.include_router(auth_router())
    app.include_router(api_router())
    app.include_router(page_router(app))
    mount_static(app)
    return app
