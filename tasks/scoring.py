"""The `conductor.score` task (reward queue): reward a finished job's chains.

Finalize returns it as an `Effects.score` and the dispatcher sends it, with the deterministic task
id ``score-<job_id>``, after the commit that gave the user the answer. A job whose problem has a
reference is verified (`score_job`); a verifier that could not reach a verdict (sandbox setup,
judge call) is retried with backoff, and nothing is written until every chain has a verdict. A
job without one may first get exploration samples (`reward_pipeline.exploration`), and is then
judged as a group with them (`reward_pipeline.group_rewards`); the group judge retries its own
tries and records a failure itself. Both paths are idempotent, so a duplicate delivery or a
manual re-send is harmless.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import Celery, Task

from conductor.domain.errors import JobNotFinished, NotFound, VerifierError
from conductor.runtime import Runtime
from reward_pipeline.exploration import explore
from reward_pipeline.group_rewards import judge_job, make_group_judge
from reward_pipeline.judge_client import make_judge
from reward_pipeline.rewards import job_has_reference, score_job
from reward_pipeline.verifiers import Verifier
from tasks.dispatch import Dispatcher
from tasks.names import TaskName
from tasks.services import service_for

__all__ = ["SCORE_TASK", "register_scoring"]

log = logging.getLogger(__name__)

SCORE_TASK = TaskName.SCORE.value
MAX_RETRIES = 3
RETRY_BASE_S = 5.0  # doubled per retry: a sandbox or judge outage gets 5 s, 10 s, 20 s


def register_scoring(app: Celery, runtime: Runtime, *, judge: Verifier | None = None) -> None:
    """Register `conductor.score` on `app`. The judges are built on first use (the pool loads lazily)."""
    state: dict[str, Any] = {}
    lock = threading.Lock()

    def _lazy(key: str, build: Any) -> Any:
        with lock:
            if key not in state:
                state[key] = build()
            return state[key]

    def _judge() -> Verifier | None:
        if judge is not None:
            return judge
        return _lazy("judge", lambda: make_judge(runtime.settings, runtime.pool, runtime.gateway))  # type: ignore[no-any-return]

    @app.task(name=SCORE_TASK, bind=True, shared=False, max_retries=MAX_RETRIES)
    def score(self: Task, job_id: str, force: bool = False) -> None:
        try:
            if not job_has_reference(runtime.sessions, job_id):
                _without_reference(job_id)
                return
            rows = score_job(runtime.sessions, job_id, judge=_judge(), force=force)
        except (NotFound, JobNotFinished) as exc:
            log.warning("score %s: %s", job_id, exc)  # nothing to do; retrying would not help
            return
        except VerifierError as exc:
            if self.request.retries >= MAX_RETRIES:
                log.error("score %s: giving up after %d retries: %s", job_id, self.request.retries, exc)
                return
            raise self.retry(exc=exc, countdown=RETRY_BASE_S * 2**self.request.retries) from exc
        log.info("scored job %s: %s", job_id, [r.value for r in rows])

    def _without_reference(job_id: str) -> None:
        if not runtime.settings.group_judge:
            return
        group = _lazy("group_judge", lambda: make_group_judge(runtime.settings, runtime.pool, runtime.gateway))
        if group is None:
            return  # no judge worker configured: such jobs stay unrewarded (feedback may still come)
        service = _lazy("service", lambda: service_for(runtime, Dispatcher(app).submit))
        if explore(service, job_id) is not None:
            return  # judged once the exploration samples have finished
        record = judge_job(runtime.sessions, job_id, *group)
        if record is not None:
            log.info("judged job %s: %s %s", record.job_id, record.status, record.scores)
