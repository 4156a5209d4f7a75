"""The `conductor.score` task (reward queue): verify a finished job's chains and store rewards.

Finalize returns it as an `Effects.score` and the dispatcher sends it, with the deterministic task id ``score-<job_id>``, when the job's
problem has a reference. Scoring is idempotent (`score_job` skips a job already scored), so
a duplicate delivery or a manual re-send is harmless. A verifier that could not reach a
verdict (sandbox setup, judge call) is retried with backoff; nothing is written until every
chain has a verdict.
"""

from __future__ import annotations

import logging
import threading

from celery import Celery, Task

from conductor.app.runtime import Runtime
from conductor.domain.errors import JobNotFinished, NotFound, VerifierError
from reward_pipeline.judge_client import make_judge
from reward_pipeline.rewards import score_job
from reward_pipeline.verifiers import Verifier
from tasks.names import TaskName

__all__ = ["SCORE_TASK", "register_scoring"]

log = logging.getLogger(__name__)

SCORE_TASK = TaskName.SCORE.value
MAX_RETRIES = 3
RETRY_BASE_S = 5.0  # doubled per retry: a sandbox or judge outage gets 5 s, 10 s, 20 s


def register_scoring(app: Celery, runtime: Runtime, *, judge: Verifier | None = None) -> None:
    """Register `conductor.score` on `app`. The judge is built on first use (the pool loads lazily)."""
    state: dict[str, Verifier | None] = {}
    lock = threading.Lock()

    def _judge() -> Verifier | None:
        if judge is not None:
            return judge
        with lock:
            if "judge" not in state:
                state["judge"] = make_judge(runtime)
            return state["judge"]

    @app.task(name=SCORE_TASK, bind=True, shared=False, max_retries=MAX_RETRIES)
    def score(self: Task, job_id: str, force: bool = False) -> None:
        try:
            rows = score_job(runtime, job_id, judge=_judge(), force=force)
        except (NotFound, JobNotFinished) as exc:
            log.warning("score %s: %s", job_id, exc)  # nothing to do; retrying would not help
            return
        except VerifierError as exc:
            if self.request.retries >= MAX_RETRIES:
                log.error("score %s: giving up after %d retries: %s", job_id, self.request.retries, exc)
                return
            raise self.retry(exc=exc, countdown=RETRY_BASE_S * 2**self.request.retries) from exc
        log.info("scored job %s: %s", job_id, [r.value for r in rows])
