"""Webhook deliveries as the tenant sees them: one event for one endpoint, with every attempt."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel


class WebhookAttempt(BaseModel):
    attempt: int
    status_code: int | None
    error: str | None
    duration_s: float | None


class WebhookDelivery(BaseModel):
    id: str
    object: Literal["webhook.delivery"] = "webhook.delivery"
    event_type: str
    subject_id: str
    status: Literal["pending", "delivered", "failed"]
    url: str
    created_at: datetime | None
    delivered_at: datetime | None
    next_attempt_at: datetime | None
    last_error: str | None
    attempts: list[WebhookAttempt]


class WebhookDeliveryList(BaseModel):
    object: Literal["list"] = "list"
    data: list[WebhookDelivery]
