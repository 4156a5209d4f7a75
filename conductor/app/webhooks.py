"""Webhooks on the Standard Webhooks scheme: an event is a stored delivery, signed and POSTed by a
task; every attempt is recorded, failures back off exponentially, and any delivery can be replayed.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker
from standardwebhooks import Webhook

from conductor.app import responses
from conductor.app.outbound import destinations, guarded_client
from conductor.app.read_models import JobSummary
from conductor.config.settings import Settings
from conductor.domain.errors import DestinationRefused, NotFound
from conductor.domain.states import TERMINAL_JOB_VALUES
from conductor.store.models import Batch, Job, Tenant, WebhookAttempt, WebhookDelivery, utcnow

DELIVERED, PENDING, FAILED = "delivered", "pending", "failed"


def job_event(sessions: sessionmaker[Session], job_id: str) -> str | None:
    """Record a `job.<status>` event for a finished job that has an endpoint; returns the delivery id."""
    with sessions.begin() as s:
        # Most jobs have no endpoint: found out from three columns, without loading the job.
        endpoint = s.execute(
            select(Job.webhook_url, Tenant.webhook_url)
            .select_from(Job)
            .outerjoin(Tenant, Tenant.id == Job.tenant_id)
            .where(Job.id == job_id)
        ).first()
        if endpoint is None or not (endpoint[0] or endpoint[1]):
            return None
        job = s.get(Job, job_id)
        if job is None or job.status not in TERMINAL_JOB_VALUES:
            return None
        if job.batch_id is not None and not job.webhook_url:
            return None  # batch jobs report once, as the batch
        if job.explore_of is not None:
            return None  # training's extra samples: the tenant never asked for them
        tenant = s.get(Tenant, job.tenant_id) if job.tenant_id else None
        url = job.webhook_url or (tenant.webhook_url if tenant else None)
        if not url:
            return None
        if (job.options or {}).get("api") == responses.API:  # OpenAI's event names, the response as data
            resp = responses.response_object(s, job)
            event = {"completed": "response.completed", "incomplete": "response.incomplete"}.get(
                resp["status"], f"response.{resp['status']}"
            )
            return _record(s, job.tenant_id, event, job.id, url, resp)
        data = JobSummary.of(job).to_json()  # the job as `GET /v1/jobs` lists it
        return _record(s, job.tenant_id, f"job.{job.status}", job.id, url, data)


def batch_event(sessions: sessionmaker[Session], batch_id: str) -> str | None:
    with sessions.begin() as s:
        batch = s.get(Batch, batch_id)
        tenant = s.get(Tenant, batch.tenant_id) if batch and batch.tenant_id else None
        if batch is None or tenant is None or not tenant.webhook_url:
            return None
        data = {
            "id": batch.id,
            "object": "batch",
            "status": batch.status,
            "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id,
        }
        return _record(s, batch.tenant_id, f"batch.{batch.status}", batch.id, tenant.webhook_url, data)


def _record(s: Session, tenant_id: str | None, event: str, subject: str, url: str, data: dict[str, Any]) -> str | None:
    """The delivery row; its id is derived from the event, so a repeated finalize records it once."""
    delivery_id = f"msg_{subject}.{event.split('.', 1)[1]}"
    if s.get(WebhookDelivery, delivery_id) is not None:
        return None
    payload = {"type": event, "timestamp": utcnow().isoformat(), "data": data}
    s.add(
        WebhookDelivery(
            id=delivery_id, tenant_id=tenant_id, event_type=event, subject_id=subject, url=url, payload=payload
        )
    )
    return delivery_id


def deliver(sessions: sessionmaker[Session], settings: Settings, delivery_id: str) -> float | None:
    """One signed attempt. Returns the delay before the next attempt, or None when there is none."""
    with sessions() as s:
        d = s.get(WebhookDelivery, delivery_id)
        if d is None or d.status != PENDING:
            return None
        tenant = s.get(Tenant, d.tenant_id) if d.tenant_id else None
        secret = tenant.webhook_secret if tenant else None
        url, payload, attempt = d.url, d.payload, d.attempts + 1
    body = json.dumps(payload)
    at = datetime.now(UTC)
    headers = {
        "content-type": "application/json",
        "webhook-id": delivery_id,
        "webhook-timestamp": str(int(at.timestamp())),
    }
    if secret:
        headers["webhook-signature"] = Webhook(secret).sign(delivery_id, at, body)
    started = time.monotonic()
    status_code: int | None = None
    error: str | None = None
    try:
        with guarded_client(destinations(settings), settings.webhook_timeout_s) as client:
            r = client.post(url, content=body, headers=headers)
        status_code = r.status_code
        if not 200 <= r.status_code < 300:
            error = f"HTTP {r.status_code}"  # a redirect too: it is not followed
    except (DestinationRefused, httpx.HTTPError) as exc:
        error = attempt_error(exc)
    ok = error is None
    delay = None if ok or attempt >= settings.webhook_max_attempts else _backoff(settings, attempt)
    with sessions.begin() as s:
        s.add(
            WebhookAttempt(
                delivery_id=delivery_id,
                attempt=attempt,
                status_code=status_code,
                error=error,
                duration_s=round(time.monotonic() - started, 4),
            )
        )
        d = s.get_one(WebhookDelivery, delivery_id)
        d.attempts = attempt
        d.last_error = error
        if ok:
            d.status, d.delivered_at, d.next_attempt_at = DELIVERED, utcnow(), None
        elif delay is None:
            d.status, d.next_attempt_at = FAILED, None
        else:
            d.next_attempt_at = utcnow() + timedelta(seconds=delay)
    return delay


def attempt_error(exc: Exception) -> str:
    """What the tenant reads about a failed attempt: the kind of failure, never the exception's text,
    which could tell what lies inside the network (refused ports, internal names, resolver answers)."""
    if isinstance(exc, DestinationRefused):
        return "destination not allowed"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    if isinstance(exc, httpx.ConnectError):
        return "could not connect"
    return "request failed"


def overdue(sessions: sessionmaker[Session], settings: Settings, *, limit: int = 500) -> list[str]:
    """Pending deliveries whose attempt is overdue by more than `ready_grace_s`: the process that held
    it died (its countdown message, or the attempt in a sender thread, went with it). Returned for
    the reaper to send again; each is given the backoff its attempts have reached before it counts
    as overdue once more, so a delivery is never re-sent on every sweep."""
    t = utcnow()
    cut = t - timedelta(seconds=settings.ready_grace_s)
    with sessions.begin() as s:
        rows = s.scalars(
            select(WebhookDelivery)
            .where(
                WebhookDelivery.status == PENDING,
                func.coalesce(WebhookDelivery.next_attempt_at, WebhookDelivery.created_at) < cut,
            )
            .limit(limit)
        ).all()
        for d in rows:
            d.next_attempt_at = t + timedelta(seconds=_backoff(settings, max(d.attempts, 1)))
        return [d.id for d in rows]


def _backoff(settings: Settings, attempt: int) -> float:
    """The delay after failed attempt number `attempt` (1-based): doubling from webhook_backoff_s."""
    return float(settings.webhook_backoff_s * 2 ** (attempt - 1))


def replay(sessions: sessionmaker[Session], tenant_id: str | None, delivery_id: str) -> str:
    """Send a delivery again (delivered or failed): it goes back to pending, attempts keep counting."""
    with sessions.begin() as s:
        d = s.get(WebhookDelivery, delivery_id)
        if d is None or (tenant_id is not None and d.tenant_id != tenant_id):
            raise NotFound(f"no webhook delivery {delivery_id}")
        d.status, d.next_attempt_at = PENDING, utcnow()  # due now: overdue only past the grace
    return delivery_id


def deliveries(
    sessions: sessionmaker[Session],
    tenant_id: str,
    subject_id: str | None = None,
    *,
    delivery_id: str | None = None,
    status: str | None = None,
) -> list[dict[str, Any]]:
    """The tenant's newest 100 deliveries (of one job or batch, one delivery, or in one state), each with its attempts."""
    with sessions() as s:
        q = select(WebhookDelivery).where(WebhookDelivery.tenant_id == tenant_id)
        if subject_id is not None:
            q = q.where(WebhookDelivery.subject_id == subject_id)
        if delivery_id is not None:
            q = q.where(WebhookDelivery.id == delivery_id)
        if status is not None:
            q = q.where(WebhookDelivery.status == status)
        rows = s.scalars(q.order_by(WebhookDelivery.created_at.desc()).limit(100)).all()
        out = []
        for d in rows:
            tries = s.scalars(
                select(WebhookAttempt).where(WebhookAttempt.delivery_id == d.id).order_by(WebhookAttempt.id)
            )
            out.append(
                {
                    "id": d.id,
                    "event_type": d.event_type,
                    "subject_id": d.subject_id,
                    "status": d.status,
                    "url": d.url,
                    "created_at": d.created_at,
                    "delivered_at": d.delivered_at,
                    "next_attempt_at": d.next_attempt_at,
                    "last_error": d.last_error,
                    "attempts": [
                        {
                            "attempt": a.attempt,
                            "status_code": a.status_code,
                            "error": a.error,
                            "duration_s": a.duration_s,
                        }
                        for a in tries
                    ],
                }
            )
        return out
