"""Lifecycle states of jobs, chains, rounds and steps (stored as their string values)."""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    WAITING = "waiting"  #: row written, not yet admitted by the feeder (schedulers/feeder.py)
    QUEUED = "queued"  #: row written, solve not yet picked up
    RUNNING = "running"  #: at least one chain is in progress
    DONE = "done"  #: finished with an answer
    FAILED = "failed"  #: every chain failed; `error` says why
    BUDGET_EXCEEDED = "budget_exceeded"  #: stopped before overspending its budget
    CANCELLED = "cancelled"  #: cancelled by its client; no model call starts after that


class ChainStatus(StrEnum):
    """A chain is one line of Conductor rounds solving one question (a sample, or a nested call)."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class RoundKind(StrEnum):
    PLAN = "plan"  #: first Conductor call of a chain, or a resample after a parse failure
    REPLAN = "replan"  #: recursive call that sees the previous workflow and answer
    FALLBACK = "fallback"  #: no Conductor call: the configured one-step workflow after failed plans
    FIXED = "fixed"  #: no Conductor call: a workflow given with the job (baselines, hand-written pipelines)


class RoundStatus(StrEnum):
    PLANNING = "planning"  #: Conductor call in flight
    RUNNING = "running"  #: workflow steps executing
    DONE = "done"  #: all steps done; `answer` holds the last step's output
    ACCEPTED = "accepted"  #: replan returned three empty lists: previous answer kept
    UNPARSEABLE = "unparseable"  #: completion held no valid workflow
    FAILED = "failed"  #: a step or the Conductor call failed


class ParseStatus(StrEnum):
    OK = "ok"
    ACCEPT = "accept"  #: three empty lists (replan only)
    FAILED = "failed"


class StepStatus(StrEnum):
    PENDING = "pending"  #: waiting for dependencies
    READY = "ready"  #: dependencies done, run_step enqueued
    RUNNING = "running"  #: leased by a Celery host (`lease_holder`) until `lease_until`
    DELEGATED = "delegated"  #: a Conductor-as-worker step: a nested workflow works on it, unleased
    DONE = "done"
    FAILED = "failed"
    SKIPPED = "skipped"  #: its round failed or was abandoned before it ran
    CANCELLED = "cancelled"  #: was running when its job was cancelled; its late result is dropped


class BatchStatus(StrEnum):
    """OpenAI Batch API statuses (batches submitted through the API)."""

    VALIDATING = "validating"  #: input file being read; jobs created as lines are accepted
    IN_PROGRESS = "in_progress"  #: every line read; jobs running
    FINALIZING = "finalizing"  #: every job ended; output and error files being written
    COMPLETED = "completed"
    FAILED = "failed"  #: the input could not be read at all
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"
    EXPIRED = "expired"  #: the completion window ran out first


TERMINAL_JOB = {JobStatus.DONE, JobStatus.FAILED, JobStatus.BUDGET_EXCEEDED, JobStatus.CANCELLED}
#: The same, as the strings the store holds (for SQL `IN` clauses).
TERMINAL_JOB_VALUES = frozenset(s.value for s in TERMINAL_JOB)
TERMINAL_BATCH = {BatchStatus.COMPLETED, BatchStatus.FAILED, BatchStatus.CANCELLED, BatchStatus.EXPIRED}
