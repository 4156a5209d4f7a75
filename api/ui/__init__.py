"""The job explorer: server-rendered pages at /ui over the same keys and tenant scopes as the API."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from api.ui import auth
from api.ui.routes import STATIC_DIR, router


def install(app: FastAPI) -> None:
    app.include_router(router)
    app.mount(auth.PATH + "/static", StaticFiles(directory=STATIC_DIR), name="ui-static")

    @app.exception_handler(auth.LoginRequired)
    async def _login(request: Request, _: auth.LoginRequired) -> Response:
        if request.url.path.endswith("/data") or request.method != "GET":
            body = {"error": {"message": "log in at /ui/login", "type": "authentication_error"}}
            return JSONResponse(body, status_code=401)
        return auth.to_login(request)
