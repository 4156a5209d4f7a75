"""The explorer's pages. Lists are rendered on the server; a job's workflow graphs are drawn in the
browser (dagre lays them out) from the same job view the API returns, polled while the job runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from api.ui import auth, format
from conductor.app.explorer import Explorer, Viewer
from conductor.domain.errors import NotFound
from conductor.domain.states import JobStatus

HERE = Path(__file__).parent
STATIC_DIR = HERE / "static"
templates = Jinja2Templates(directory=HERE / "templates")
format.install(templates.env)

router = APIRouter(prefix=auth.PATH, include_in_schema=False)
Who = Annotated[Viewer, Depends(auth.current_viewer)]
STATUSES = [s.value for s in JobStatus]


def explorer(request: Request) -> Explorer:
    return Explorer(request.app.state.api.sessions)


def page(request: Request, name: str, viewer: Viewer | None, status_code: int = 200, **ctx: Any) -> HTMLResponse:
    return templates.TemplateResponse(request, name, {"viewer": viewer, **ctx}, status_code=status_code)


@router.get("")
def home() -> RedirectResponse:
    return RedirectResponse(auth.PATH + "/jobs", status_code=303)


@router.get("/login")
def login_form(request: Request, next: str | None = None) -> HTMLResponse:
    return page(request, "login.html", None, next=auth.safe_next(next))


@router.post("/login", response_model=None)
def login(request: Request, key: Annotated[str, Form(max_length=400)], next: Annotated[str, Form()] = "") -> Response:
    viewer = auth.key_viewer(request, key.strip())
    if viewer is None:
        msg = "That key is unknown, revoked or expired, or lacks the jobs scope."
        return page(request, "login.html", None, status_code=401, next=auth.safe_next(next), error=msg)
    response = RedirectResponse(auth.safe_next(next), status_code=303)
    auth.remember(response, key.strip(), secure=request.url.scheme == "https")
    return response


@router.post("/logout")
def logout() -> RedirectResponse:
    response = RedirectResponse(auth.PATH + "/login", status_code=303)
    auth.forget(response)
    return response


@router.get("/batches")
def batches_page(request: Request, viewer: Who, fragment: bool = False) -> HTMLResponse:
    rows = explorer(request).batches(viewer)
    live = any(b["ended"] < b["total"] for b in rows)
    name = "batches_rows.html" if fragment else "batches.html"
    response = page(request, name, viewer, batches=rows, live=live)
    response.headers["x-live"] = "1" if live else "0"
    return response


@router.get("/jobs")
def jobs_page(
    request: Request,
    viewer: Who,
    status: Annotated[str | None, Query(max_length=32)] = None,
    batch: Annotated[str | None, Query(max_length=64)] = None,
    q: Annotated[str | None, Query(max_length=200)] = None,
    cursor: Annotated[str | None, Query(max_length=400)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 25,
    fragment: bool = False,
) -> HTMLResponse:
    result = explorer(request).jobs(
        viewer, status=status or None, batch_id=batch or None, text=q or None, cursor=cursor or None, limit=limit
    )
    filters = {"status": status or "", "batch": batch or "", "q": q or ""}
    live = any(j["status"] not in ("done", "failed", "budget_exceeded", "cancelled") for j in result.jobs)
    name = "jobs_rows.html" if fragment else "jobs.html"
    response = page(request, name, viewer, page=result, filters=filters, statuses=STATUSES, live=live)
    response.headers["x-live"] = "1" if live else "0"
    return response


@router.get("/jobs/{job_id}")
def job_page(request: Request, viewer: Who, job_id: str) -> HTMLResponse:
    try:
        job = explorer(request).job(viewer, job_id)
    except NotFound:
        return page(request, "not_found.html", viewer, status_code=404, what=f"job {job_id}")
    return page(request, "job.html", viewer, job=job)


@router.get("/jobs/{job_id}/data")
def job_data(request: Request, viewer: Who, job_id: str) -> Response:
    """What the job page polls: the job view, or 404 for someone else's job."""
    try:
        view = explorer(request).job(viewer, job_id)
    except NotFound:
        return JSONResponse({"error": {"message": f"no job {job_id}", "type": "not_found_error"}}, status_code=404)
    # Keys sorted as the page's embedded copy (Jinja's tojson) is, so an unchanged job compares equal.
    body = json.dumps(view, sort_keys=True, default=str)
    return Response(body, media_type="application/json", headers={"cache-control": "no-store"})


@router.get("/checkpoints")
def checkpoints_page(request: Request, viewer: Who) -> HTMLResponse:
    return page(request, "checkpoints.html", viewer, **explorer(request).checkpoints())
