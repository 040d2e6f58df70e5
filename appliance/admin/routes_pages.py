"""The HTML pages and their assets, all served from files inside the package (no CDN, no fonts)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from appliance.admin.errors import ApiError
from appliance.admin.security import SESSION_COOKIE, AuthContext, live_login

STATIC_DIR = Path(str(resources.files("appliance.admin").joinpath("static")))


def swagger_ui_dir() -> Path:
    """Swagger UI's files from the ``fastapi-offline`` package (installed with the daemon)."""
    import fastapi_offline

    return Path(fastapi_offline.__file__).parent / "static"


def _logged_in(request: Request) -> bool:
    context: AuthContext = request.app.state.auth
    try:
        return live_login(context, request.cookies.get(SESSION_COOKIE)) is not None
    except ApiError:
        return False


def _page(name: str) -> FileResponse:
    return FileResponse(STATIC_DIR / name, media_type="text/html; charset=utf-8")


def page_router(app: FastAPI) -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/")
    def dashboard(request: Request) -> Response:
        if not _logged_in(request):
            return RedirectResponse("/login", status_code=303)
        return _page("index.html")

    @router.get("/login")
    def login_page() -> Response:
        return _page("login.html")

    @router.get("/docs")
    def docs(request: Request) -> Response:
        if not _logged_in(request):
            return RedirectResponse("/login?next=/docs", status_code=303)
        return _page("docs.html")

    @router.get("/openapi.json")
    def openapi(request: Request) -> Response:
        if not _logged_in(request):
            return JSONResponse(
                {"error": "not_authenticated", "message": "log in first (POST /api/login)"}, status_code=401
            )
        return JSONResponse(app.openapi())

    @router.get("/favicon.ico")
    def favicon() -> Response:
        return FileResponse(STATIC_DIR / "favicon.svg", media_type="image/svg+xml")

    return router


def mount_static(app: FastAPI) -> None:
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.mount("/vendor/swagger-ui", StaticFiles(directory=swagger_ui_dir()), name="swagger-ui")
