"""The pipeline tasks: solve, plan, replan, run_step, finalize, reap. Each is a thin wrapper over
`conductor.app.orchestrator.Orchestrator`; what becomes runnable is enqueued by `Dispatcher`."""

from __future__ import annotations

from collections.abc import Callable

from celery import Celery, Task

from conductor.app.orchestrator import Orchestrator
from conductor.app.runtime import Runtime
from conductor.domain.effects import Effects
from conductor.domain.errors import RateLimited
from reward_pipeline.rewards import unscored_jobs
from tasks.scoring import enqueue_score, job_has_reference, register_scoring


class Dispatcher:
    """Turns Effects into messages. Task ids are deterministic so duplicates are recognisable."""

    def __init__(self, app: Celery) -> None:
        self.app = app

    def __call__(self, eff: Effects) -> None:
        for job_id in eff.solve:
            self.app.send_task("conductor.solve", args=[job_id], task_id=f"solve-{job_id}")
        for rid in eff.plans:
            self.app.send_task("conductor.plan", args=[rid], task_id=f"plan-{rid}")
        for rid in eff.replans:
            self.app.send_task("conductor.replan", args=[rid], task_id=f"replan-{rid}")
        for sid in eff.steps:
            self.app.send_task("conductor.run_step", args=[sid], task_id=f"step-{sid}")
        for job_id in eff.finalize:
            self.app.send_task("conductor.finalize", args=[job_id], task_id=f"finalize-{job_id}")

    def submit(self, job_ids: list[str]) -> None:
        self(Effects(solve=list(job_ids)))


def register(app: Celery, runtime: Runtime) -> None:
    dispatch = Dispatcher(app)
    app.conductor_dispatch = dispatch  # type: ignore[attr-defined]
    register_scoring(app, runtime)
    orchestrator = Orchestrator(runtime)

    @app.task(name="conductor.solve", bind=True, shared=False)
    def solve(self: Task, job_id: str) -> None:
        dispatch(orchestrator.start(job_id))

    def _until_admitted(task: Task, work: Callable[[], Effects], hand_back: Callable[[], None]) -> None:
        # Retries only ever come from cluster rate limits (max_retries=None on these tasks): the
        # work goes back to the queue, freeing this worker slot, for as long as the limit asks;
        # it is never dropped, and real failures are recorded by the orchestrator instead.
        try:
            dispatch(work())
        except RateLimited as exc:
            hand_back()
            raise task.retry(countdown=exc.retry_after) from exc

    def _plan(task: Task, round_id: int) -> None:
        _until_admitted(
            task,
            lambda: orchestrator.plan_round(round_id, task.request.hostname or ""),
            lambda: runtime.engine.release_round(round_id),
        )

    @app.task(name="conductor.plan", bind=True, shared=False, max_retries=None)
    def plan(self: Task, round_id: int) -> None:
        _plan(self, round_id)

    @app.task(name="conductor.replan", bind=True, shared=False, max_retries=None)
    def replan(self: Task, round_id: int) -> None:
        # Same work as plan: the round's kind tells the orchestrator which prompt to use.
        _plan(self, round_id)

    @app.task(name="conductor.run_step", bind=True, shared=False, max_retries=None)
    def run_step(self: Task, step_id: int) -> None:
        _until_admitted(
            self,
            lambda: orchestrator.run_step(step_id, self.request.hostname or ""),
            lambda: runtime.engine.release_step(step_id),
        )

    @app.task(name="conductor.finalize", bind=True, shared=False)
    def finalize(self: Task, job_id: str) -> None:
        if orchestrator.finalize(job_id) and job_has_reference(runtime, job_id):
            enqueue_score(app, job_id)

    @app.task(name="conductor.reap", bind=True, shared=False)
    def reap(self: Task) -> None:
        dispatch(orchestrator.recover())
        # A score task lost between finalize's commit and its enqueue is re-sent from the store.
        for job_id in unscored_jobs(runtime, older_than_s=runtime.settings.ready_grace_s):
            enqueue_score(app, job_id)
