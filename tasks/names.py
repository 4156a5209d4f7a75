"""Every Celery task and queue name, in one place (the CLI, beat and the dispatcher import these)."""

from __future__ import annotations

from enum import StrEnum


class Queue(StrEnum):
    CONDUCTOR = "conductor"  #: Conductor calls (plan, replan)
    LLM = "llm"  #: pool model calls (run_step); many threads per process
    REWARD = "reward"  #: verifiers (sandbox, math-verify, judge)
    TRAIN = "train"  #: GRPO retraining
    DEFAULT = "default"  #: short bookkeeping (solve, finalize, reap)


class TaskName(StrEnum):
    SOLVE = "conductor.solve"
    PLAN = "conductor.plan"
    REPLAN = "conductor.replan"
    RUN_STEP = "conductor.run_step"
    FINALIZE = "conductor.finalize"
    REAP = "conductor.reap"
    SCORE = "conductor.score"
    RETRAIN_CHECK = "conductor.retrain_check"
    RETRAIN = "conductor.retrain"
    BATCH_READ = "conductor.batch_read"
    BATCH_FINALIZE = "conductor.batch_finalize"
    BATCH_SWEEP = "conductor.batch_sweep"
    RETENTION = "conductor.retention"


QUEUES = tuple(q.value for q in Queue)
#: What `conductor worker` consumes unless told otherwise: every queue (one host does it all).
DEFAULT_WORKER_QUEUES = ",".join(QUEUES)

ROUTES: dict[str, dict[str, str]] = {
    TaskName.SOLVE: {"queue": Queue.DEFAULT},
    TaskName.PLAN: {"queue": Queue.CONDUCTOR},
    TaskName.REPLAN: {"queue": Queue.CONDUCTOR},
    TaskName.RUN_STEP: {"queue": Queue.LLM},
    TaskName.FINALIZE: {"queue": Queue.DEFAULT},
    TaskName.REAP: {"queue": Queue.DEFAULT},
    TaskName.SCORE: {"queue": Queue.REWARD},
    TaskName.RETRAIN_CHECK: {"queue": Queue.DEFAULT},
    TaskName.RETRAIN: {"queue": Queue.TRAIN},
    # Batch API work, off the API process: reading an input file, writing the output files, and
    # beat's sweep that expires, claims and re-sends it.
    TaskName.BATCH_READ: {"queue": Queue.DEFAULT},
    TaskName.BATCH_FINALIZE: {"queue": Queue.DEFAULT},
    TaskName.BATCH_SWEEP: {"queue": Queue.DEFAULT},
    TaskName.RETENTION: {"queue": Queue.DEFAULT},
}
