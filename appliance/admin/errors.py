"""Every error answer of the admin API: a status, a stable code and a message that names the fix."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        headers: dict[str, str] | None = None,
        *,
        problems: list[dict[str, str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
        self.problems = problems  # each {"key", "message"}: where a form marks them


_CODES = {
    400: "bad_request",
    401: "not_authenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    429: "rate_limited",
}


def error_response(
    status: int,
    code: str,
    message: str,
    headers: dict[str, str] | None = None,
    problems: list[dict[str, str]] | None = None,
) -> JSONResponse:
    body: dict[str, object] = {"error": code, "message": message}
    if problems is not None:
        body["problems"] = problems
    return JSONResponse(body, status_code=status, headers=headers)


def _location(loc: tuple[object, ...] | list[object]) -> str:
    return ".".join(str(part) for part in loc) or "request"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, err: ApiError) -> JSONResponse:
        return error_response(err.status, err.code, err.message, err.headers, err.problems)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
        code = _CODES.get(err.status_code, "error")
        message = str(err.detail)
        if err.status_code == 404 and message == "Not Found":
            message = f"no such page or API route: {request.url.path} (the API is described at /docs)"
        elif err.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path} (see /docs)"
        return error_response(err.status_code, code, message, dict(err.headers) if err.headers else None)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, err: RequestValidationError) -> JSONResponse:
        problems = [f"{_location(e.get('loc', ()))}: {e.get('msg', 'invalid')}" for e in err.errors()]
        return error_response(422, "invalid_request", "; ".join(problems) or "invalid request")

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, err: Exception) -> JSONResponse:
        log.exception("admin page: %s %s failed", request.method, request.url.path)
        return error_response(500, "internal_error", "the device hit an unexpected error; see its log")
