"""Prometheus metrics read from the store (the source of truth) and the broker at scrape time,
so every API replica reports the same cluster-wide numbers."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import case, func, or_, select
from sqlalchemy.orm import Session, sessionmaker

from conductor.store import queries
from conductor.store.models import Job, Round, Step, WebhookAttempt, WebhookDelivery

log = logging.getLogger("conductor.api")
STEP_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
JOB_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600)
RECENT_JOBS = 5000  # job latency is computed over the newest finished jobs
QUEUES = ("conductor", "llm", "reward", "train", "default")


class StoreCollector(Collector):
    def __init__(self, sessions: sessionmaker[Session], broker_url: str) -> None:
        self.sessions = sessions
        self.broker_url = broker_url

    def collect(self) -> Iterator[Metric]:
        with self.sessions() as s:
            jobs = GaugeMetricFamily("conductor_jobs", "Jobs by state.", labels=["status"])
            for state, n in s.execute(select(Job.status, func.count()).group_by(Job.status)):
                jobs.add_metric([state], n)
            yield jobs
            yield self._step_latency(s)
            yield self._job_latency(s)
            yield from self._usage(s)
            failures = CounterMetricFamily(
                "conductor_webhook_failures", "Webhook delivery attempts that did not get a 2xx answer."
            )
            failures.add_metric(
                [],
                s.scalar(
                    select(func.count()).where(
                        or_(WebhookAttempt.status_code.is_(None), WebhookAttempt.status_code >= 300)
                    )
                )
                or 0,
            )
            yield failures
            dead = GaugeMetricFamily("conductor_webhook_deliveries", "Webhook events by state.", labels=["status"])
            for status, n in s.execute(select(WebhookDelivery.status, func.count()).group_by(WebhookDelivery.status)):
                dead.add_metric([status], n)
            yield dead
        yield self._queue_depth()

    @staticmethod
    def _step_latency(s: Any) -> Metric:
        cols = [func.sum(case((Step.latency_s <= b, 1), else_=0)) for b in STEP_BUCKETS]
        row = s.execute(
            select(func.count(), func.coalesce(func.sum(Step.latency_s), 0.0), *cols).where(Step.latency_s.is_not(None))
        ).one()
        count, total, cumulative = row[0], float(row[1]), [int(c or 0) for c in row[2:]]
        buckets = [(str(b), c) for b, c in zip(STEP_BUCKETS, cumulative, strict=True)] + [("+Inf", count)]
        return HistogramMetricFamily(
            "conductor_step_latency_seconds", "Model-call latency of workflow steps.", buckets=buckets, sum_value=total
        )

    @staticmethod
    def _job_latency(s: Any) -> Metric:
        rows = s.execute(
            select(Job.created_at, Job.finished_at)
            .where(Job.finished_at.is_not(None))
            .order_by(Job.finished_at.desc())
            .limit(RECENT_JOBS)
        ).all()
        seconds = [(f - c).total_seconds() for c, f in rows if c is not None and f is not None]
        buckets = [(str(b), sum(1 for x in seconds if x <= b)) for b in JOB_BUCKETS] + [("+Inf", len(seconds))]
        return HistogramMetricFamily(
            "conductor_job_latency_seconds",
            f"Submit-to-finish latency of the newest {RECENT_JOBS} finished jobs.",
            buckets=buckets,
            sum_value=sum(seconds),
        )

    @staticmethod
    def _usage(s: Any) -> Iterator[Metric]:
        tokens = CounterMetricFamily("conductor_tokens", "Tokens by model and direction.", labels=["model", "kind"])
        cost = CounterMetricFamily("conductor_cost_usd", "Cost by model.", labels=["model"])
        step_rows = s.execute(
            select(Step.model, func.sum(Step.prompt_tokens), func.sum(Step.completion_tokens), func.sum(Step.cost_usd))
            .where(Step.model.is_not(None))
            .group_by(Step.model)
        ).all()
        round_rows = s.execute(
            select(
                Round.conductor_model,
                func.sum(Round.prompt_tokens),
                func.sum(Round.completion_tokens),
                func.sum(Round.cost_usd),
            )
            .where(Round.conductor_model.is_not(None))
            .group_by(Round.conductor_model)
        ).all()
        for model, prompt, completion, usd in [*step_rows, *round_rows]:
            tokens.add_metric([model, "prompt"], int(prompt or 0))
            tokens.add_metric([model, "completion"], int(completion or 0))
            cost.add_metric([model], float(usd or 0.0))
        yield tokens
        yield cost
        # What training spends on production traffic, apart from the users' own jobs (which the
        # per-model totals above include as well): exploration samples and group-judge calls.
        spent = queries.background_usage(s)
        bg_cost = CounterMetricFamily(
            "conductor_training_traffic_cost_usd", "Exploration samples and judging, by purpose.", labels=["purpose"]
        )
        bg_tokens = CounterMetricFamily(
            "conductor_training_traffic_tokens", "Tokens of exploration samples and judging.", labels=["purpose"]
        )
        for purpose in ("exploration", "judging"):
            bg_cost.add_metric([purpose], spent[purpose]["cost_usd"])
            bg_tokens.add_metric([purpose], spent[purpose]["tokens"])
        yield bg_cost
        yield bg_tokens

    def _queue_depth(self) -> Metric:
        depth = GaugeMetricFamily("conductor_queue_depth", "Messages waiting in each broker queue.", labels=["queue"])
        url = self.broker_url
        if not url.startswith(("redis://", "rediss://")):
            return depth
        import redis

        try:
            client = redis.Redis.from_url(url, socket_timeout=2)
            for q in QUEUES:
                depth.add_metric([q], int(client.llen(q)))
            client.close()
        except redis.RedisError as exc:
            log.warning("queue depth unavailable: %s", type(exc).__name__)
        return depth
