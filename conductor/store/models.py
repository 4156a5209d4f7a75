"""SQLAlchemy 2 table models. PostgreSQL in production, SQLite embedded; the same models serve both."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TypeVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

from conductor.domain.states import BatchStatus, ChainStatus, JobStatus, ParseStatus, RoundKind, RoundStatus, StepStatus

E = TypeVar("E", bound=StrEnum)


#: The key of a high-volume table (chains, rounds, steps, rewards, judgements, webhook attempts) and
#: every column pointing at one: BIGINT on PostgreSQL, where a 32-bit key runs out after ~2.1 billion
#: rows (a few months of steps at full load); plain INTEGER on SQLite, whose INTEGER PRIMARY KEY is
#: already 64 bits and only autoincrements when spelled exactly so (migration 0012).
BigId = BigInteger().with_variant(Integer, "sqlite")


def utcnow() -> datetime:
    return datetime.now(UTC)


def new_id() -> str:
    return uuid.uuid4().hex


class State(TypeDecorator[E]):
    """A state column: stored as the StrEnum's string in a VARCHAR (the schema is unchanged, no
    migration), read back as the Enum. Writing a string that is not one of its values fails."""

    impl = String
    cache_ok = True

    def __init__(self, enum: type[E], length: int = 32) -> None:
        super().__init__(length)
        self.enum = enum

    def process_bind_param(self, value: E | str | None, dialect: Dialect) -> str | None:
        return None if value is None else self.enum(value).value

    def process_result_value(self, value: str | None, dialect: Dialect) -> E | None:
        return None if value is None else self.enum(value)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class Tenant(Base):
    __tablename__ = "tenants"
    id: Mapped[str] = mapped_column(String(64), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    # Quotas (None = unlimited): answered with 429 and Retry-After by the API.
    max_concurrent_jobs: Mapped[int | None] = mapped_column(Integer)
    tokens_per_day: Mapped[int | None] = mapped_column(Integer)
    usd_per_day: Mapped[float | None] = mapped_column(Float)
    # Where job and batch events are POSTed (a job's own webhook_url wins), signed with this secret.
    webhook_url: Mapped[str | None] = mapped_column(Text)
    webhook_secret: Mapped[str | None] = mapped_column(String(200))
    # Production-traffic exploration: None = never asked (off), True = opted in, False = opted out.
    exploration: Mapped[bool | None] = mapped_column(Boolean)
    # Whether its traces may train the Conductor: None = never said (the deployment's
    # `train_on_tenant_data` decides), True = yes, False = no (revision 0009).
    train_on_data: Mapped[bool | None] = mapped_column(Boolean)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ApiKey(Base):
    __tablename__ = "api_keys"
    id: Mapped[str] = mapped_column(String(64), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    key_hash: Mapped[str] = mapped_column(String(128), unique=True)  # sha256 of the key; the key itself is never stored
    prefix: Mapped[str | None] = mapped_column(String(16))  # the key's first characters, to tell keys apart
    scopes: Mapped[list[Any]] = mapped_column(JSON, default=list)
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class File(Base):
    """An uploaded or generated file (OpenAI Files API); its bytes live under the files directory."""

    __tablename__ = "files"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str | None] = mapped_column(ForeignKey("tenants.id"), index=True)
    purpose: Mapped[str] = mapped_column(String(32))  # batch | batch_output
    filename: Mapped[str] = mapped_column(String(300))
    bytes: Mapped[int] = mapped_column(Integer, default=0)
    path: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Batch(Base):
    __tablename__ = "batches"
    id: Mapped[str] = mapped_column(String(64), primary_key=True, default=new_id)
    tenant_id: Mapped[str | None] = mapped_column(ForeignKey("tenants.id"), index=True)
    source: Mapped[str] = mapped_column(Text, default="")
    total: Mapped[int] = mapped_column(Integer, default=0)
    rejected: Mapped[list[Any]] = mapped_column(JSON, default=list)  # [{"line": n, "error": "..."}]
    # Batch API (None for CLI batches): OpenAI's status, files and timestamps.
    status: Mapped[BatchStatus | None] = mapped_column(State(BatchStatus), index=True)
    endpoint: Mapped[str | None] = mapped_column(String(64))
    completion_window: Mapped[str | None] = mapped_column(String(16))
    input_file_id: Mapped[str | None] = mapped_column(String(64))
    output_file_id: Mapped[str | None] = mapped_column(String(64))
    error_file_id: Mapped[str | None] = mapped_column(String(64))
    invalid_lines: Mapped[int] = mapped_column(Integer, default=0)  # malformed input lines (error-file lines)
    meta: Mapped[dict[str, Any] | None] = mapped_column("metadata", JSON)
    errors: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    in_progress_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finalizing_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    failed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    cancelling_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    cancelled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    expired_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # Work done for a Batch API batch by workers, not the API process (revision 0005): input lines
    # read and committed so far (a killed reader resumes after them), and beat's send accounting
    # for reading the file and writing the output files (the last send or sign of progress).
    lines_read: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    sent_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    sends: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # The creating request's trace context (revision 0011; null while tracing is off or without a
    # caller): the jobs of its lines are children of it, though a worker reads them later.
    traceparent: Mapped[str | None] = mapped_column(String(55))


class Job(Base):
    __tablename__ = "jobs"
    # A unique constraint would let NULL tenants repeat a key (NULLs are distinct in SQL):
    # index the coalesced tenant instead, so a key is unique within "no tenant" too.
    __table_args__ = (
        Index("uq_jobs_tenant_idem", func.coalesce(text("tenant_id"), ""), "idempotency_key", unique=True),
        Index("ix_jobs_tenant_created", "tenant_id", "created_at", "id"),  # the API's cursor pagination
        Index("ix_jobs_batch_line", "batch_id", "line_no"),  # a batch's output file, in input order
    )
    id: Mapped[str] = mapped_column(String(64), primary_key=True, default=new_id)
    tenant_id: Mapped[str | None] = mapped_column(ForeignKey("tenants.id"), index=True)
    batch_id: Mapped[str | None] = mapped_column(ForeignKey("batches.id"), index=True)
    line_no: Mapped[int | None] = mapped_column(Integer)
    external_id: Mapped[str | None] = mapped_column(String(200))
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    priority: Mapped[int] = mapped_column(Integer, default=5)
    status: Mapped[JobStatus] = mapped_column(State(JobStatus), default=JobStatus.QUEUED, index=True)
    problem: Mapped[dict[str, Any]] = mapped_column(JSON)
    samples: Mapped[int] = mapped_column(Integer, default=1)
    # Per-job overrides: {"workflow": {...three lists...}} runs a fixed workflow with no Conductor
    # call (baselines), {"max_steps": 1} restricts the Conductor (router baseline), {"recursion": false}.
    options: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    budget_tokens: Mapped[int | None] = mapped_column(Integer)
    budget_usd: Mapped[float | None] = mapped_column(Float)
    open_chains: Mapped[int] = mapped_column(Integer, default=0)
    model_calls: Mapped[int] = mapped_column(Integer, default=0)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0)
    # Worker answers served from the deterministic-call cache: counted in the tokens above, not in the cost.
    cache_hits: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    cached_tokens: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    saved_usd: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    answer: Mapped[str | None] = mapped_column(Text)
    answer_chain_id: Mapped[int | None] = mapped_column(BigId)
    error: Mapped[str | None] = mapped_column(Text)
    webhook_url: Mapped[str | None] = mapped_column(Text)
    # An exploration job: extra Conductor samples for the user job named here, judged as one group with it.
    explore_of: Mapped[str | None] = mapped_column(String(64), index=True)
    # Send accounting (the reaper's): when it last re-sent this row's message, and how many times.
    sent_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    sends: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # The job's trace (revision 0009; null while tracing is off): the job span's W3C traceparent, minted
    # at submission, and the span id of the caller that submitted it (`conductor.telemetry`).
    traceparent: Mapped[str | None] = mapped_column(String(55))
    trace_caller: Mapped[str | None] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # When retention removed this job's texts (question, answers, plans, outputs); its numbers stay.
    texts_removed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    chains: Mapped[list[Chain]] = relationship(back_populates="job", order_by="Chain.id")


class Chain(Base):
    """A line of Conductor rounds answering one question: a sample of a job, or a nested call."""

    __tablename__ = "chains"
    __table_args__ = (UniqueConstraint("job_id", "sample_index", "parent_step_id", name="uq_chain"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), index=True)
    sample_index: Mapped[int] = mapped_column(Integer, default=0)
    parent_step_id: Mapped[int | None] = mapped_column(BigId, ForeignKey("steps.id", use_alter=True), unique=True)
    depth: Mapped[int] = mapped_column(Integer, default=0)
    question: Mapped[str] = mapped_column(Text)
    status: Mapped[ChainStatus] = mapped_column(State(ChainStatus), default=ChainStatus.RUNNING)
    answer: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    rounds_used: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    job: Mapped[Job] = relationship(back_populates="chains")
    rounds: Mapped[list[Round]] = relationship(back_populates="chain", order_by="Round.round_index")


class Round(Base):
    """One Conductor call (or a fallback workflow) and the workflow it produced."""

    __tablename__ = "rounds"
    __table_args__ = (UniqueConstraint("chain_id", "round_index", name="uq_round"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    chain_id: Mapped[int] = mapped_column(BigId, ForeignKey("chains.id"), index=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), index=True)
    round_index: Mapped[int] = mapped_column(Integer)
    kind: Mapped[RoundKind] = mapped_column(State(RoundKind, 16))
    status: Mapped[RoundStatus] = mapped_column(State(RoundStatus), default=RoundStatus.PLANNING, index=True)
    prompt_messages: Mapped[list[Any] | None] = mapped_column(JSON)
    prompt_token_ids: Mapped[list[Any] | None] = mapped_column(JSON)
    completion_text: Mapped[str | None] = mapped_column(Text)
    completion_token_ids: Mapped[list[Any] | None] = mapped_column(JSON)
    completion_logprobs: Mapped[list[Any] | None] = mapped_column(JSON)
    conductor_model: Mapped[str | None] = mapped_column(String(300))
    policy_version: Mapped[str | None] = mapped_column(String(200))
    sampling: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # temperature, max_tokens: the behaviour policy
    parse_status: Mapped[ParseStatus | None] = mapped_column(State(ParseStatus, 16))
    parse_error: Mapped[str | None] = mapped_column(Text)
    workflow: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    n_steps: Mapped[int] = mapped_column(Integer, default=0)
    steps_done: Mapped[int] = mapped_column(Integer, default=0)
    answer: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0)
    latency_s: Mapped[float | None] = mapped_column(Float)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    lease_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Send accounting (the reaper's): when it last re-sent this row's message, and how many times.
    sent_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    sends: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    chain: Mapped[Chain] = relationship(back_populates="rounds")
    steps: Mapped[list[Step]] = relationship(back_populates="round", order_by="Step.step_index")


class Step(Base):
    __tablename__ = "steps"
    __table_args__ = (UniqueConstraint("round_id", "step_index", name="uq_step"), Index("ix_steps_status", "status"))
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    round_id: Mapped[int] = mapped_column(BigId, ForeignKey("rounds.id"), index=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), index=True)
    step_index: Mapped[int] = mapped_column(Integer)
    worker_index: Mapped[int] = mapped_column(Integer)
    worker_name: Mapped[str] = mapped_column(String(200))
    subtask: Mapped[str] = mapped_column(Text)
    access: Mapped[Any] = mapped_column(JSON)
    dependencies: Mapped[list[Any]] = mapped_column(JSON)
    pending_deps: Mapped[int] = mapped_column(Integer)
    status: Mapped[StepStatus] = mapped_column(State(StepStatus), default=StepStatus.PENDING)
    output: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    model: Mapped[str | None] = mapped_column(String(300))
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0)
    latency_s: Mapped[float | None] = mapped_column(Float)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    #: The Celery host that holds (or, once the step ended, last held) its lease.
    lease_holder: Mapped[str | None] = mapped_column(String(200))
    lease_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    ready_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Send accounting (the reaper's): when it last re-sent this row's message, and how many times.
    sent_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    sends: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    round: Mapped[Round] = relationship(back_populates="steps")


class Reward(Base):
    __tablename__ = "rewards"
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), index=True)
    chain_id: Mapped[int | None] = mapped_column(BigId, ForeignKey("chains.id"), index=True)
    round_id: Mapped[int | None] = mapped_column(BigId, ForeignKey("rounds.id"), index=True)
    value: Mapped[float] = mapped_column(Float)
    correct: Mapped[bool | None] = mapped_column(Boolean)
    verifier: Mapped[str] = mapped_column(String(64))
    source: Mapped[str] = mapped_column(String(32), default="verifier")  # verifier | judge | feedback | parse
    # Judge rewards: which model judged, under which rubric (so a rubric change never mixes silently).
    judge_model: Mapped[str | None] = mapped_column(String(300))
    rubric_version: Mapped[str | None] = mapped_column(String(64))
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Judgement(Base):
    """One group-judge verdict over the samples of one job (plus its exploration samples), or its failure.

    A failed judgement (the judge timed out, was rate-limited or answered garbage on every try)
    is recorded here and writes no reward: an unjudged sample is not a wrong one.
    """

    __tablename__ = "judgements"
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), index=True)  # the user's job: the group's key
    tenant_id: Mapped[str | None] = mapped_column(ForeignKey("tenants.id"), index=True)
    status: Mapped[str] = mapped_column(String(16), index=True)  # ok | failed
    worker: Mapped[str] = mapped_column(String(200))
    judge_model: Mapped[str | None] = mapped_column(String(300))
    rubric_version: Mapped[str] = mapped_column(String(64))
    chain_ids: Mapped[list[Any]] = mapped_column(JSON, default=list)  # the judged samples, in the group's order
    order: Mapped[list[Any]] = mapped_column(JSON, default=list)  # positions shown to the judge, per try
    scores: Mapped[list[Any] | None] = mapped_column(JSON)  # per chain, in chain_ids' order
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    exploration: Mapped[bool] = mapped_column(Boolean, default=False)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)


class Checkpoint(Base):
    __tablename__ = "checkpoints"
    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    parent_id: Mapped[str | None] = mapped_column(String(200))
    base_model: Mapped[str] = mapped_column(Text)
    path: Mapped[str | None] = mapped_column(Text)
    data_window: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    status: Mapped[str] = mapped_column(String(32), default="candidate")  # candidate | active | rejected | retired
    stage: Mapped[str | None] = mapped_column(String(32))  # warmup | grpo
    config: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    gate: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # the evaluation gate's decision and numbers
    promoted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class TrainingCycle(Base):
    """One retraining cycle (dataset -> train -> gate -> promote), whatever started it."""

    __tablename__ = "training_cycles"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    trigger: Mapped[str] = mapped_column(String(32))  # beat | manual | online
    status: Mapped[str] = mapped_column(String(32), default="running", index=True)
    checkpoint_id: Mapped[str | None] = mapped_column(String(200))
    stats: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class TrainingStep(Base):
    """One optimizer step's health (importance weights, ESS, clipping, KL, staleness) for `train status`."""

    __tablename__ = "training_steps"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cycle_id: Mapped[int | None] = mapped_column(ForeignKey("training_cycles.id"), index=True)
    checkpoint_id: Mapped[str | None] = mapped_column(String(200), index=True)
    step: Mapped[int] = mapped_column(Integer)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class WebhookDelivery(Base):
    """One event for one endpoint (Standard Webhooks `webhook-id` = id); every try is a WebhookAttempt."""

    __tablename__ = "webhook_deliveries"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str | None] = mapped_column(ForeignKey("tenants.id"), index=True)
    event_type: Mapped[str] = mapped_column(String(64))
    subject_id: Mapped[str] = mapped_column(String(64), index=True)  # the job or batch
    url: Mapped[str] = mapped_column(Text)
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default="pending", index=True)  # pending | delivered | failed
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class WebhookAttempt(Base):
    __tablename__ = "webhook_attempts"
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    delivery_id: Mapped[str] = mapped_column(ForeignKey("webhook_deliveries.id"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    status_code: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    duration_s: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class CallCacheEntry(Base):
    """One greedy model answer, keyed by everything it depends on (`conductor.inference.call_cache`)."""

    __tablename__ = "call_cache"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    model: Mapped[str] = mapped_column(String(300))
    text: Mapped[str] = mapped_column(Text)
    prompt_tokens: Mapped[int] = mapped_column(Integer)
    completion_tokens: Mapped[int] = mapped_column(Integer)
    cost_usd: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    hits: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
