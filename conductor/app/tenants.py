"""Tenants, API keys and quotas. A key is shown once at creation; only its sha256 is stored."""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from conductor.domain.errors import InputError, NotFound, QuotaExceeded
from conductor.domain.states import TERMINAL_JOB
from conductor.store.models import ApiKey, Batch, File, Job, Tenant, utcnow

#: What a key may be allowed to do; a key created without scopes gets all of them.
SCOPES = ("models", "chat", "jobs", "files", "batches")
#: Never given by default: the job explorer (`/ui`) shows such a key every tenant's work.
ADMIN_SCOPE = "admin"
KEY_PREFIX = "ck-"


Owned = TypeVar("Owned", Job, Batch, File)


def owned(s: Session, model: type[Owned], row_id: str, tenant_id: str, what: str) -> Owned:
    """The row if the tenant owns it. Another tenant's row is simply not found, with the same
    message as a missing one, so an id never confirms that someone else's record exists."""
    row = s.get(model, row_id)
    if row is None or row.tenant_id != tenant_id:
        raise NotFound(f"no {what} {row_id}")
    return row


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class Principal:
    """Who is calling: the tenant a verified key belongs to and what the key may do."""

    tenant_id: str
    key_id: str
    scopes: frozenset[str]

    @property
    def is_admin(self) -> bool:
        return ADMIN_SCOPE in self.scopes


@dataclass(frozen=True)
class Quotas:
    max_concurrent_jobs: int | None = None
    tokens_per_day: int | None = None
    usd_per_day: float | None = None


def ensure_tenant(s: Session, name: str, quotas: Quotas | None = None, webhook_url: str | None = None) -> Tenant:
    tenant = s.scalar(select(Tenant).where(Tenant.name == name))
    if tenant is None:
        tenant = Tenant(name=name, webhook_secret=new_webhook_secret())
        s.add(tenant)
    if quotas is not None:
        tenant.max_concurrent_jobs = quotas.max_concurrent_jobs
        tenant.tokens_per_day = quotas.tokens_per_day
        tenant.usd_per_day = quotas.usd_per_day
    if webhook_url is not None:
        tenant.webhook_url = webhook_url or None
    if not tenant.webhook_secret:
        tenant.webhook_secret = new_webhook_secret()
    s.flush()
    return tenant


def create_key(
    sessions: sessionmaker[Session],
    tenant_name: str,
    *,
    scopes: list[str] | None = None,
    expires_in_days: float | None = None,
    quotas: Quotas | None = None,
    webhook_url: str | None = None,
) -> tuple[str, str]:
    """A new key for the tenant (created when missing); returns (key, tenant_id). The key is not kept."""
    unknown = sorted(set(scopes or []) - {*SCOPES, ADMIN_SCOPE})
    if unknown:
        raise InputError(f"unknown scopes {unknown}; choose from {[*SCOPES, ADMIN_SCOPE]}")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    with sessions.begin() as s:
        tenant = ensure_tenant(s, tenant_name, quotas, webhook_url)
        s.add(
            ApiKey(
                tenant_id=tenant.id,
                key_hash=hash_key(key),
                prefix=key[:10],
                scopes=sorted(scopes or SCOPES),
                expires_at=utcnow() + timedelta(days=expires_in_days) if expires_in_days is not None else None,
            )
        )
        return key, tenant.id


def verify_key(sessions: sessionmaker[Session], key: str) -> Principal | None:
    """The principal of a valid key; None for an unknown, revoked or expired one (never says which)."""
    with sessions() as s:
        row = s.scalar(select(ApiKey).where(ApiKey.key_hash == hash_key(key)))
        if row is None or row.revoked:
            return None
        if row.expires_at is not None and _aware(row.expires_at) <= utcnow():
            return None
        return Principal(tenant_id=row.tenant_id, key_id=row.id, scopes=frozenset(row.scopes or SCOPES))


def tenant_id(sessions: sessionmaker[Session], name_or_id: str) -> str:
    """The id of the tenant named `name_or_id`, or of the one with that id; NotFound for neither
    (a filter by a tenant that is not there would read as "no data" instead of as the typo it is)."""
    with sessions() as s:
        found = s.scalar(select(Tenant.id).where(Tenant.name == name_or_id)) or s.scalar(
            select(Tenant.id).where(Tenant.id == name_or_id)
        )
    if found is None:
        raise NotFound(f"no tenant {name_or_id}")
    return found


def set_exploration(sessions: sessionmaker[Session], tenant_name: str, agreed: bool | None) -> str:
    """Opt a tenant in (True) or out (False) of exploration, or back to never asked (None: off)."""
    with sessions.begin() as s:
        tenant = s.scalar(select(Tenant).where(Tenant.name == tenant_name))
        if tenant is None:
            raise NotFound(f"no tenant {tenant_name}")
        tenant.exploration = agreed
        return tenant.id


def set_training(sessions: sessionmaker[Session], tenant_name: str, agreed: bool | None) -> str:
    """Let a tenant's traces train the Conductor (True), forbid it (False), or leave it to the
    deployment's `train_on_tenant_data` (None). Applies to traces already stored too."""
    with sessions.begin() as s:
        tenant = s.scalar(select(Tenant).where(Tenant.name == tenant_name))
        if tenant is None:
            raise NotFound(f"no tenant {tenant_name}")
        tenant.train_on_data = agreed
        return tenant.id


def revoke_key(sessions: sessionmaker[Session], prefix: str) -> int:
    with sessions.begin() as s:
        rows = s.scalars(select(ApiKey).where(ApiKey.prefix == prefix, ApiKey.revoked.is_(False))).all()
        for row in rows:
            row.revoked = True
        return len(rows)


def check_quota(sessions: sessionmaker[Session], tenant_id: str) -> None:
    """Raise QuotaExceeded when the tenant may not start another job now."""
    with sessions() as s:
        tenant = s.get(Tenant, tenant_id)
        if tenant is None:
            return
        if tenant.max_concurrent_jobs is not None:
            live = s.scalar(
                select(func.count()).where(
                    Job.tenant_id == tenant_id,
                    Job.status.not_in([st.value for st in TERMINAL_JOB]),
                    Job.explore_of.is_(None),  # training's extra samples are not the tenant's jobs
                )
            )
            if (live or 0) >= tenant.max_concurrent_jobs:
                raise QuotaExceeded(
                    f"{live} jobs in flight (limit {tenant.max_concurrent_jobs} concurrent jobs)", retry_after=5
                )
        if tenant.tokens_per_day is None and tenant.usd_per_day is None:
            return
        midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        tokens, usd = s.execute(
            select(
                func.coalesce(func.sum(Job.prompt_tokens + Job.completion_tokens), 0),
                func.coalesce(func.sum(Job.cost_usd), 0.0),
            ).where(Job.tenant_id == tenant_id, Job.created_at >= midnight, Job.explore_of.is_(None))
        ).one()
        until_tomorrow = max(1, int((midnight + timedelta(days=1) - datetime.now(UTC)).total_seconds()))
        if tenant.tokens_per_day is not None and tokens >= tenant.tokens_per_day:
            raise QuotaExceeded(f"{tokens} tokens today (limit {tenant.tokens_per_day})", retry_after=until_tomorrow)
        if tenant.usd_per_day is not None and usd >= tenant.usd_per_day:
            raise QuotaExceeded(f"${usd:.4f} today (limit ${tenant.usd_per_day})", retry_after=until_tomorrow)


def _aware(t: datetime) -> datetime:
    """SQLite hands back naive datetimes; everything is stored in UTC."""
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def new_webhook_secret() -> str:
    """A Standard Webhooks secret: `whsec_` + standard base64 of 24 random bytes.

    Not `token_urlsafe`: its `-` and `_` are dropped by the library's base64 decoding, which then
    fails on the shortened string for about half of all secrets.
    """
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
