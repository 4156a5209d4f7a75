"""Exploration: GRPO groups from live traffic, after the user already has the answer.

A user's job without a reference runs one sample; one sample is no GRPO group. For a share
(`exploration_rate`) of such jobs of tenants that agreed (`Tenant.exploration is True`; a tenant
never asked is off) and whose traces may train the Conductor (`conductor.domain.consent`), the score task, which runs on the `reward` queue only after finalize has
committed the user's answer, submits an *exploration job*: the same problem, G-1 more Conductor
samples, `explore_of` = the user's job, at the feeder's lowest priority. When it finishes, the
group judge scores the user's sample and the G-1 others together (`group_rewards.judge_job`).

The user's job is never touched: its answer, latency, usage and quotas stay its own
(exploration jobs are left out of the tenant's quotas and shown apart in `usage` and `/metrics`).
Spending is capped cluster-wide per UTC day (`exploration_tokens_per_day`, `exploration_usd_per_day`,
exploration jobs plus the judging of explored groups), checked before each exploration job starts;
a job in flight may finish past the cap by its own size.
"""

from __future__ import annotations

import logging
import random
from datetime import UTC, datetime
from typing import Any

from conductor.app.service import JobSpec, Service
from conductor.domain.consent import may_train
from conductor.domain.problem import Problem
from conductor.domain.states import JobStatus
from conductor.store import queries
from conductor.store.models import Tenant

__all__ = ["exploration_budget_left", "explore"]

log = logging.getLogger(__name__)

#: Options of jobs that are the system's own (evaluation, gate, fixed workflows): never explored.
_NOT_TRAFFIC = ("eval", "gate", "workflow", "policy", "max_steps")


def exploration_budget_left(service: Service) -> bool:
    settings = service.settings
    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    with service.sessions() as s:
        tokens, usd = queries.exploration_spent_since(s, midnight)
    return tokens < settings.exploration_tokens_per_day and usd < settings.exploration_usd_per_day


def explore(service: Service, job_id: str, rng: random.Random | None = None) -> str | None:
    """Submit the exploration job for `job_id` if it qualifies (see the module doc); its id, or None.

    Idempotent: the exploration job's idempotency key is derived from the user's job, so a
    duplicate score task finds the first one.
    """
    settings = service.settings
    with service.sessions() as s:
        job = queries.get_job(s, job_id)
        if job.explore_of is not None or job.samples > 1 or job.status != JobStatus.DONE:
            return None
        if any(k in (job.options or {}) for k in _NOT_TRAFFIC) or job.tenant_id is None:
            return None
        problem = Problem.model_validate(job.problem)
        if problem.has_reference:
            return None
        tenant = s.get(Tenant, job.tenant_id)
        if tenant is None or tenant.exploration is not True:
            return None
        if not may_train(tenant.train_on_data, settings.train_on_tenant_data):
            return None  # samples that may never train are spending for nothing
        tenant_id, options = job.tenant_id, _inherited(job.options or {})
    if (rng or random).random() >= settings.exploration_rate:
        return None
    if not exploration_budget_left(service):
        log.info("exploration budget for today is spent; job %s is not explored", job_id)
        return None
    spec = JobSpec(
        tenant_id=tenant_id,
        samples=settings.exploration_samples - 1,
        priority=settings.exploration_priority,
        options=options,
        idempotency_key=f"explore:{job_id}",
        explore_of=job_id,
    )
    explorer, _ = service.submit(problem, spec, via_feeder=True)
    log.info("job %s: exploring with %d more samples as job %s", job_id, spec.samples, explorer)
    return explorer


def _inherited(options: dict[str, Any]) -> dict[str, Any]:
    """The user's job settings that shape the Conductor's samples (recursion) carry over; nothing else."""
    return {k: v for k, v in options.items() if k in ("recursion",)}
