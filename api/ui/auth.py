"""How a browser presents its API key: a login form posts it once, and it comes back in an HttpOnly,
SameSite=Strict cookie scoped to /ui (scripts cannot read it, other sites cannot send it). A key
needs the `jobs` scope to look at work, or `admin` to see every tenant's."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import Request
from fastapi.responses import RedirectResponse, Response

from conductor.app.explorer import Viewer
from conductor.app.tenants import ADMIN_SCOPE, verify_key

COOKIE = "conductor_ui_key"
PATH = "/ui"
#: A week; the key's own expiry and revocation are checked on every request regardless.
MAX_AGE_S = 7 * 24 * 3600


class LoginRequired(Exception):
    """No cookie, or a key that is unknown, revoked, expired or lacks the scope."""


def key_viewer(request: Request, key: str) -> Viewer | None:
    principal = verify_key(request.app.state.api.sessions, key)
    if principal is None or not ({"jobs", ADMIN_SCOPE} & principal.scopes):
        return None
    return Viewer(tenant_id=principal.tenant_id, admin=principal.is_admin)


def current_viewer(request: Request) -> Viewer:
    key = request.cookies.get(COOKIE)
    viewer = key_viewer(request, key) if key else None
    if viewer is None:
        raise LoginRequired
    return viewer


def safe_next(target: str | None) -> str:
    """Only a path inside the explorer: never an absolute URL another site could put in the link."""
    if target and target.startswith(PATH + "/") and not target.startswith("//") and "\\" not in target:
        return target
    return PATH + "/jobs"


def to_login(request: Request) -> RedirectResponse:
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"{PATH}/login?next={quote(here, safe='')}", status_code=303)


def remember(response: Response, key: str, secure: bool) -> None:
    response.set_cookie(COOKIE, key, max_age=MAX_AGE_S, path=PATH, httponly=True, samesite="strict", secure=secure)


def forget(response: Response) -> None:
    response.delete_cookie(COOKIE, path=PATH, httponly=True, samesite="strict")
