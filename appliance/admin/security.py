"""Who is asking: the session cookie, roles, CSRF tokens, and same-origin checks."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends, Request
from fastapi.security import APIKeyCookie, APIKeyHeader

from appliance.admin.errors import ApiError
from appliance.admin.logins import Login, LoginStore
from appliance.admin.ratelimit import LoginRateLimiter
from appliance.admin.users import UserDirectory
from engines.setting_files import SECRET, read_setting_text

log = logging.getLogger(__name__)

SESSION_COOKIE = "appliance_session"
CSRF_HEADER = "X-CSRF-Token"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

# Declared so the OpenAPI schema (and /docs) shows how requests are authenticated.
session_cookie = APIKeyCookie(name=SESSION_COOKIE, auto_error=False, description="set by POST /api/login")
csrf_header = APIKeyHeader(
    name=CSRF_HEADER, auto_error=False, description="csrf_token from POST /api/login or GET /api/session"
)


@dataclass
class AuthContext:
    logins: LoginStore
    users: UserDirectory
    limiter: LoginRateLimiter
    cookie_secure: bool


def auth_context(request: Request) -> AuthContext:
    context: AuthContext = request.app.state.auth
    return context


def check_same_origin(request: Request) -> None:
    """A browser's Origin (or Referer) must be this device's own address."""
    origin = request.headers.get("origin") or request.headers.get("referer")
    if origin is None:
        return  # not a browser (curl, scripts): the cookie and CSRF token still apply
    parts = urlsplit(origin)
    if parts.netloc != request.headers.get("host", ""):
        raise ApiError(
            403, "cross_origin", f"request from another site ({parts.scheme}://{parts.netloc}) refused"
        )


AuthDep = Annotated[AuthContext, Depends(auth_context)]


def live_login(context: AuthContext, token: str | None) -> Login | None:
    """The login of ``token`` while its user still has what the login granted: a user removed,
    given another role or another password is logged out at their next request."""
    login = context.logins.get(token)
    if login is None or context.users.grant(login.username) == login.grant:
        return login
    context.logins.delete(token)
    log.info("admin login of user %r ended: the account was changed or removed", login.username)
    raise ApiError(
        401,
        "account_changed",
        f"user {login.username!r} was removed, or their role or password changed; log in again",
    )


def current_login(
    request: Request, token: Annotated[str | None, Depends(session_cookie)], context: AuthDep
) -> Login:
    login = live_login(context, token)
    if login is None:
        raise ApiError(
            401, "not_authenticated", "log in first (POST /api/login); the session may have expired"
        )
    request.state.login = login
    return login


LoginDep = Annotated[Login, Depends(current_login)]


def require_csrf(
    request: Request, login: LoginDep, token: Annotated[str | None, Depends(csrf_header)]
) -> Login:
    if request.method in UNSAFE_METHODS:
        check_same_origin(request)
        if not login.csrf_matches(token):
            raise ApiError(
                403,
                "csrf_failed",
                f"missing or wrong {CSRF_HEADER} header; send the csrf_token of GET /api/session",
            )
    return login


CsrfLoginDep = Annotated[Login, Depends(require_csrf)]


def require_admin(login: CsrfLoginDep) -> Login:
    if login.role != "admin":
        raise ApiError(403, "forbidden", f"user {login.username!r} is a viewer; this needs the admin role")
    return login


bearer_header = APIKeyHeader(
    name="Authorization", auto_error=False, description="Bearer <admin.metrics_token_file's token>"
)


def read_metrics_token(path: Path) -> str:
    """The scraper's token; an unreadable or empty file is the operator's to fix, said on each scrape."""
    try:
        token = read_setting_text(path, SECRET).strip()
    except OSError as err:
        raise ApiError(
            503,
            "metrics_token_unreadable",
            f"admin.metrics_token_file {path} cannot be read ({err.strerror})",
        ) from err
    if len(token) < 16:
        raise ApiError(
            503, "metrics_token_too_short", f"admin.metrics_token_file {path} holds fewer than 16 characters"
        )
    return token


def metrics_access(token_file: Path | None) -> Callable[..., None]:
    """/metrics for a logged-in user, or for a scraper sending the token of ``token_file``."""

    def check(
        request: Request,
        authorization: Annotated[str | None, Depends(bearer_header)],
        cookie: Annotated[str | None, Depends(session_cookie)],
        context: AuthDep,
    ) -> None:
        if token_file is not None and authorization is not None:
            scheme, _, given = authorization.partition(" ")
            expected = read_metrics_token(token_file)
            if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), expected.encode()):
                return
            raise ApiError(401, "not_authenticated", "wrong metrics token (admin.metrics_token_file)")
        current_login(request, cookie, context)

    return check
