"""POST /api/login, POST /api/logout, GET /api/session."""

from __future__ import annotations

import logging
import math

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from appliance.admin.errors import ApiError
from appliance.admin.logins import Login
from appliance.admin.schemas import ErrorBody, LoginRequest, SessionInfo
from appliance.admin.security import (
    SESSION_COOKIE,
    AuthDep,
    CsrfLoginDep,
    LoginDep,
    check_same_origin,
)
from appliance.admin.users import UserFileError, grant_of

log = logging.getLogger(__name__)

_ERRORS: dict[int | str, dict[str, object]] = {
    401: {"model": ErrorBody},
    403: {"model": ErrorBody},
    422: {"model": ErrorBody},
}


def _info(login: Login, request: Request) -> SessionInfo:
    return SessionInfo(
        username=login.username,
        role=login.role,
        csrf_token=login.csrf_token,
        expires_at=login.expires_at,
        refresh_s=request.app.state.refresh_s,
    )


def auth_router() -> APIRouter:
    router = APIRouter(prefix="/api", tags=["login"])

    @router.post(
        "/login",
        response_model=SessionInfo,
        responses={**_ERRORS, 429: {"model": ErrorBody, "description": "too many failed logins"}},
    )
    async def login(
        body: LoginRequest, request: Request, response: Response, context: AuthDep
    ) -> SessionInfo:
        """Log in; sets the session cookie (HttpOnly, SameSite=Strict) and returns the CSRF token."""
        check_same_origin(request)
        client = request.client.host if request.client else "unknown"
        keys = [f"client:{client}", f"user:{body.username}"]
        wait_s = context.limiter.take(keys)  # counted as failed until the password proves right
        if wait_s > 0:
            retry = math.ceil(wait_s)
            raise ApiError(
                429,
                "rate_limited",
                f"too many failed logins; try again in {retry} s",
                headers={"Retry-After": str(retry)},
            )
        try:
            if not await run_in_threadpool(context.users.users):
                context.limiter.succeeded(keys, forget=[])  # no password was tried
                raise ApiError(
                    401,
                    "no_accounts",
                    "no admin page account exists yet; create one on the device with "
                    "`appliance admin passwd --user NAME --role admin`",
                )
        except UserFileError as err:
            context.limiter.succeeded(keys, forget=[])
            raise ApiError(401, "no_accounts", f"the accounts file is unreadable: {err}") from err
        user = await run_in_threadpool(context.users.authenticate, body.username, body.password)
        if user is None:
            log.warning("failed admin login for user %r from %s", body.username, client)
            raise ApiError(401, "bad_credentials", "wrong user name or password")
        context.limiter.succeeded(keys, forget=[keys[1]])
        token, login = context.logins.create(user.name, user.role, grant_of(user))
        response.set_cookie(
            SESSION_COOKIE,
            token,
            max_age=int(context.logins.ttl_s),
            path="/",
            httponly=True,
            samesite="strict",
            secure=context.cookie_secure,
        )
        log.info("admin login: user %r (%s) from %s", user.name, user.role, client)
        return _info(login, request)

    @router.post("/logout", status_code=204, responses=_ERRORS)
    def logout(
        request: Request,
        response: Response,
        _session: CsrfLoginDep,
        context: AuthDep,
    ) -> None:
        """End this login (needs the CSRF header)."""
        context.logins.delete(request.cookies.get(SESSION_COOKIE))
        response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")

    @router.get("/session", response_model=SessionInfo, responses=_ERRORS)
    def session_info(request: Request, login: LoginDep) -> SessionInfo:
        """Who is logged in, the role, and the CSRF token for state-changing requests."""
        return _info(login, request)

    return router
