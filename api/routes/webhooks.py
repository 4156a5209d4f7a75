"""Webhook deliveries of the calling tenant: list them with their attempts, replay one.

A replay sends the same event (same `webhook-id`, so receivers can de-duplicate) again, whatever
its state: delivered, failed after its last retry, or pending after its attempt was lost."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request

from api.deps import Api, JobsCaller
from api.schemas.common import ErrorResponse
from api.schemas.webhooks import WebhookDelivery, WebhookDeliveryList
from conductor.app.webhooks import deliveries, replay
from conductor.domain.errors import NotFound

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"], responses={404: {"model": ErrorResponse}})


@router.get("/deliveries", response_model=WebhookDeliveryList)
def list_deliveries(
    api: Api,
    who: JobsCaller,
    subject_id: Annotated[str | None, Query(max_length=64, description="A job or batch id.")] = None,
    status: Literal["pending", "delivered", "failed"] | None = None,
) -> WebhookDeliveryList:
    rows = deliveries(api.sessions, who.tenant_id, subject_id, status=status)
    return WebhookDeliveryList(data=[WebhookDelivery(**r) for r in rows])


@router.get("/deliveries/{delivery_id}", response_model=WebhookDelivery)
def get_delivery(delivery_id: str, api: Api, who: JobsCaller) -> WebhookDelivery:
    return WebhookDelivery(**_one(api, who.tenant_id, delivery_id))


@router.post("/deliveries/{delivery_id}/replay", response_model=WebhookDelivery, status_code=202)
def replay_delivery(delivery_id: str, request: Request, api: Api, who: JobsCaller) -> WebhookDelivery:
    replay(api.sessions, who.tenant_id, delivery_id)  # 404 for another tenant's delivery
    request.app.state.send_webhook(delivery_id)
    return WebhookDelivery(**_one(api, who.tenant_id, delivery_id))


def _one(api: Api, tenant_id: str, delivery_id: str) -> dict[str, object]:
    rows = deliveries(api.sessions, tenant_id, delivery_id=delivery_id)
    if not rows:
        raise NotFound(f"no webhook delivery {delivery_id}")
    return rows[0]
