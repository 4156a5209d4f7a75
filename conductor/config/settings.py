"""The one settings object: read once from the environment (prefix CONDUCTOR_) and passed in."""

from __future__ import annotations

import math
import os
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from conductor.config.connections import DEFAULT_LINKS, Links
from conductor.domain.destinations import Destinations

ENV_PREFIX = "CONDUCTOR_"
#: Variables with our prefix that are not settings: read by standalone tools (eval data, sandbox).
READ_ELSEWHERE = frozenset({"CONDUCTOR_DATA_DIR", "CONDUCTOR_SANDBOX_PYTHON"})


class Settings(BaseSettings):
    """Every knob of the system. Unknown CONDUCTOR_* variables are rejected, not ignored."""

    # An empty variable means "not set": Compose passes `${CONDUCTOR_X:-}` through as "" when the operator
    # did not set it, and "" is no valid number of days or list of CIDRs.
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True, env_ignore_empty=True)

    home: Path = Field(Path(".conductor"), description="Directory for the embedded database, model cache and logs.")
    database_url: str | None = Field(None, description="SQLAlchemy URL; default: SQLite file in `home`.")
    broker_url: str = Field("memory://", description="Celery broker; memory:// runs an in-process worker.")
    redis_url: str | None = Field(
        None, description="Redis for cluster-wide limits and the beat lock; default: the broker when it is redis://."
    )
    pool_file: Path | None = Field(None, description="Worker pool YAML; default: the bundled local CPU pool.")

    max_steps: int = Field(5, ge=1, le=16, description="Most steps one workflow may have (paper: 5).")
    recursion: bool = Field(True, description="Offer the Conductor a replan round after each answer.")
    max_rounds: int = Field(3, ge=1, description="Most Conductor rounds in one chain (plans, resamples, replans).")
    replans: bool | None = Field(
        None,
        description="Offer replan rounds whatever the pool's `conductor.replans` says (true/false); unset: the "
        "pool decides. `recursion` off still turns them off.",
    )
    max_depth: int = Field(1, ge=0, description="Most nesting of Conductor-as-worker calls.")
    max_model_calls: int = Field(40, ge=1, description="Most model calls (Conductor + workers) one job may make.")
    samples: int = Field(1, ge=1, le=64, description="Workflows sampled per problem (G).")
    plan_retries: int = Field(1, ge=0, description="Resamples after an unparseable plan before the fallback.")
    plan_grammar: bool = Field(
        True,
        description="Decode plans under a grammar of well-formed plans where we serve the Conductor (in-process "
        "or vLLM); a hosted Conductor keeps parse-and-resample.",
    )
    call_cache: Literal["off", "self-hosted", "all"] = Field(
        "self-hosted",
        description="Answer a repeated greedy (temperature 0) worker call from the store instead of the model: "
        "`self-hosted` for in-process and api_base models, `all` for hosted APIs too, `off`.",
    )
    fallback_worker: str | None = Field(
        None,
        description="Worker that answers alone when every plan failed to parse; default: the pool's "
        "`fallback_worker`; neither fails the chain.",
    )

    tool_miss_fallback: bool = Field(
        True,
        description="When a Conductor plan's answer is a tool miss (a tool that found nothing to run, or the "
        "calculator on an expression with no number of the question), the fallback worker answers the question "
        "instead; the plan keeps its own reward (wrong).",
    )

    judge_worker: str | None = Field(
        None,
        description="Pool worker that judges rubric problems and groups without a reference; default: a "
        "worker named `judge`, if any.",
    )
    group_judge: bool = Field(
        True, description="Judge the samples of a finished job without a reference as a group (G > 1 or exploration)."
    )
    judge_attempts: int = Field(
        3, ge=1, description="Tries of one group judgement (timeout, 429, garbage) before it fails."
    )
    judge_backoff_s: float = Field(2.0, ge=0, description="Wait before the second try of a judgement; doubles per try.")
    exploration_rate: float = Field(
        0.1, ge=0, le=1, description="Share of an opted-in tenant's jobs without a reference that get extra samples."
    )
    exploration_samples: int = Field(4, ge=2, le=16, description="Group size G of an explored job (G-1 extra samples).")
    exploration_priority: int = Field(1, description="Feeder priority of exploration jobs (chat 9, batches 3).")
    exploration_tokens_per_day: int = Field(
        200_000, ge=0, description="Cluster-wide tokens per UTC day for exploration samples and their judging."
    )
    exploration_usd_per_day: float = Field(1.0, ge=0, description="Cluster-wide USD per UTC day for the same.")

    direct_openai: bool = Field(
        True,
        description="Call self-hosted OpenAI-protocol servers (vLLM, `openai/` with an api_base) with the "
        "openai client instead of litellm, which only adds per-call CPU there.",
    )

    provider_requeues: int = Field(
        3,
        ge=0,
        description="A step or plan whose provider kept failing (5xx, 429, timeouts) through its inline retries "
        "and fallbacks goes back to the queue this many times, with a doubling countdown, before it fails.",
    )
    provider_requeue_backoff_s: float = Field(2.0, gt=0, description="The first such countdown.")

    step_lease_s: float = Field(660.0, gt=0, description="A claimed step or plan not finished by then is re-run.")
    task_time_limit_s: float = Field(600.0, gt=0, description="Hard time limit of every task (prefork pools).")
    reaper_interval_s: float = Field(30.0, gt=0, description="How often beat runs the reaper.")
    ready_grace_s: float = Field(
        60.0,
        gt=0,
        description="Work sent this long ago and neither started nor waiting in a broker queue is re-sent "
        "(steps, plans, replans, solve, finalize, score).",
    )
    resend_max_interval_s: float = Field(
        960.0,
        gt=0,
        description="The reaper's interval between re-sends of the same work doubles from ready_grace_s up to this.",
    )
    broker_scan_limit: int = Field(
        50_000,
        ge=0,
        description="Most queued messages the reaper reads to tell waiting work from lost work; past it, time alone decides.",
    )

    connect_timeout_s: float = Field(
        DEFAULT_LINKS.connect_timeout_s, gt=0, description="How long opening a Redis or PostgreSQL connection may take."
    )
    redis_socket_timeout_s: float = Field(
        DEFAULT_LINKS.redis_socket_timeout_s,
        gt=1,
        description="Longest wait for one Redis reply (broker, limits, locks) before the link counts as dead.",
    )
    redis_health_check_s: float = Field(
        DEFAULT_LINKS.redis_health_check_s,
        gt=0,
        description="A Redis link idle this long is pinged before use; a consumer's BRPOP overdue by this much "
        "is dropped and reconnected.",
    )
    tcp_keepalive_idle_s: int = Field(
        DEFAULT_LINKS.tcp_keepalive_idle_s,
        ge=1,
        description="Idle seconds before a TCP keepalive probe (Redis, PostgreSQL).",
    )
    tcp_keepalive_interval_s: int = Field(
        DEFAULT_LINKS.tcp_keepalive_interval_s, ge=1, description="Seconds between unanswered keepalive probes."
    )
    tcp_keepalive_count: int = Field(
        DEFAULT_LINKS.tcp_keepalive_count, ge=1, description="Unanswered keepalive probes that end a connection."
    )
    tcp_user_timeout_s: float = Field(
        DEFAULT_LINKS.tcp_user_timeout_s,
        gt=0,
        description="Sent data unacknowledged this long ends a Redis or PostgreSQL connection (TCP_USER_TIMEOUT).",
    )
    pg_idle_in_transaction_timeout_s: float = Field(
        DEFAULT_LINKS.pg_idle_in_transaction_timeout_s,
        ge=0,
        description="PostgreSQL ends a session idle inside a transaction this long, releasing its locks (a "
        "partitioned or vanished client); 0 disables it.",
    )

    api_host: str = Field("127.0.0.1", description="Address `conductor api` listens on.")
    api_port: int = Field(8000, ge=1, le=65535, description="Port `conductor api` listens on.")
    files_dir: Path | None = Field(
        None, description="Where Files API uploads and batch outputs live; default: home/files."
    )
    batch_sweep_s: float = Field(
        1.0, gt=0, description="How often beat sweeps Batch API batches (expire, finalize, re-send lost reads)."
    )
    webhook_max_attempts: int = Field(
        8, ge=1, description="Deliveries of one webhook event before it is marked failed."
    )
    webhook_backoff_s: float = Field(2.0, gt=0, description="First retry delay of a webhook; doubles each attempt.")
    webhook_timeout_s: float = Field(5.0, gt=0, description="How long a webhook receiver may take to answer.")
    webhook_allow: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="Comma-separated CIDRs, addresses or host names webhooks may reach besides public addresses "
        "(on-premises receivers); loopback, private, link-local, multicast and reserved ones are refused otherwise.",
    )
    webhook_senders: int = Field(
        8, ge=1, description="Threads per process that POST webhooks (a slow receiver holds one of these, no worker)."
    )

    max_body_bytes: int = Field(
        8 << 20, ge=1024, description="Largest request body the API reads (413 past it), file uploads aside."
    )
    max_upload_bytes: int = Field(200 << 20, ge=1024, description="Largest Files API upload (413 past it).")
    body_idle_timeout_s: float = Field(
        30.0,
        gt=0,
        description="Longest wait for the next piece of a request body; a client silent that long mid-body gets "
        "a 408 and nothing it sent is kept.",
    )
    max_question_chars: int = Field(
        100_000, ge=1, description="Longest question a job may carry (a chat's conversation counts whole)."
    )
    max_batch_lines: int = Field(50_000, ge=1, description="Most lines (requests) one Batch API input file may hold.")

    worker_pool: Literal["threads", "prefork", "solo", "gevent"] = "threads"
    worker_concurrency: int = Field(8, ge=1, description="`conductor worker` without -c: model calls in flight.")
    embedded_concurrency: int = Field(4, ge=1, description="Threads of the in-process worker (memory://).")

    follow_active_checkpoint: bool = Field(
        True, description="Serve the store's active Conductor checkpoint (promotions apply without a restart)."
    )
    policy_refresh_s: float = Field(5.0, gt=0, description="How often a process re-reads the active checkpoint.")
    retrain_enabled: bool = Field(False, description="Let beat start a retraining cycle when enough traces exist.")
    retrain_min_new_traces: int = Field(256, ge=1, description="New rewarded Conductor rounds that start a cycle.")
    retrain_check_s: float = Field(300.0, gt=0, description="How often beat checks whether to retrain.")
    retrain_min_groups: int = Field(
        2, ge=1, description="A cycle with fewer groups that have reward variance is skipped, the reason recorded."
    )
    retrain_dev_limit: int | None = Field(
        None, ge=1, description="Gate a beat cycle on the first N dev problems only (default: all of them)."
    )
    train_on_tenant_data: bool = Field(
        True,
        description="Whether a tenant that never said (`conductor tenants training NAME on|off`) lets its traces "
        "train the Conductor (datasets, beat cycles, the online loop, exploration).",
    )
    retention_days: float | None = Field(
        None,
        gt=0,
        description="Texts of ended jobs older than this (questions, answers, plans, step outputs, judge texts), "
        "files and webhook deliveries are removed by beat; usage numbers stay. Unset: kept forever.",
    )
    retention_check_s: float = Field(3600.0, gt=0, description="How often beat applies `retention_days`.")
    max_staleness: int = Field(
        2, ge=0, description="Most promotions between a trace's policy and the active one that training accepts."
    )
    task_events: bool = Field(False, description="Celery task events from the start (Flower enables them anyway).")
    call_slots: int | None = Field(
        None,
        ge=1,
        description="Model calls in flight at once in one worker process. With more threads (-c) than slots, a "
        "thread records its step and leases the next while the others call, so no call slot waits on database "
        "work. Unset: one per thread.",
    )
    spare_thread_share: float = Field(
        0.5,
        ge=0,
        le=4,
        description="`conductor worker -c N` runs N model calls at once per process on N x (1 + this) threads: "
        "the spare threads record a finished step and lease the next while the others call (threads pool).",
    )
    max_in_flight_jobs: int = Field(1000, ge=1, description="Feeder: most jobs queued or running at once.")
    max_queue_depth: int = Field(2000, ge=1, description="Feeder: most messages waiting in the broker's queues.")

    def worker_threads(self, calls: int) -> int:
        """Threads of a threads-pool worker that keeps `calls` model calls in flight (`spare_thread_share`)."""
        return calls + math.ceil(calls * self.spare_thread_share)

    @field_validator("webhook_allow", mode="before")
    @classmethod
    def _comma_separated(cls, v: object) -> object:
        return tuple(e.strip() for e in v.split(",") if e.strip()) if isinstance(v, str) else v

    @field_validator("webhook_allow")
    @classmethod
    def _allow_list_parses(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        Destinations.allowing(v)  # a typo fails at start, not at the first webhook
        return v

    @model_validator(mode="after")
    def _check(self) -> Settings:
        if self.step_lease_s <= self.task_time_limit_s:
            # Otherwise the reaper would re-run steps that are still legitimately running.
            raise ValueError(
                f"step_lease_s ({self.step_lease_s}) must exceed task_time_limit_s ({self.task_time_limit_s})"
            )
        unknown = sorted(
            k
            for k in os.environ
            if k.startswith(ENV_PREFIX)
            and k[len(ENV_PREFIX) :].lower() not in type(self).model_fields
            and k not in READ_ELSEWHERE
            and not k.startswith(f"{ENV_PREFIX}TEST_")
        )
        if unknown:
            raise ValueError(f"unknown settings in the environment: {', '.join(unknown)} (a typo?)")
        return self

    @property
    def visibility_timeout_s(self) -> float:
        # Redis re-delivers unacked messages after this; it must outlast any running task
        # or a slow step would be executed twice.
        return self.task_time_limit_s * 2 + 60

    @property
    def links(self) -> Links:
        """Timeouts and keepalives for every Redis and PostgreSQL connection this process opens."""
        # Every Links field is a setting of the same name.
        return Links(**{f.name: getattr(self, f.name) for f in fields(Links)})

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.home / 'conductor.db').resolve()}"

    @property
    def files_path(self) -> Path:
        return self.files_dir or self.home / "files"

    @property
    def model_cache(self) -> Path:
        return self.home

    @property
    def cluster_redis_url(self) -> str | None:
        """The Redis that coordinates processes (limits, the beat lock): explicit, else a redis:// broker."""
        if self.redis_url:
            return self.redis_url
        return self.broker_url if self.broker_url.startswith(("redis://", "rediss://")) else None

    @property
    def embedded(self) -> bool:
        return self.broker_url.startswith("memory://")
