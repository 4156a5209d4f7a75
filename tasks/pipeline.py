"""The pipeline tasks: solve, plan, replan, run_step, finalize, reap. Each is a thin wrapper over
`conductor.orchestrator.Orchestrator`; what becomes runnable is enqueued by `Dispatcher`."""

from __future__ import annotations

from celery import Celery, Task

from conductor.engine import Effects
from conductor.errors import RateLimited
from conductor.orchestrator import Orchestrator
from conductor.runtime import Runtime
from tasks.scoring import job_has_reference, register_scoring


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

    def _orchestrator(_task: Task) -> Orchestrator:
        return orchestrator

    @app.task(name="conductor.solve", bind=True, shared=False)
    def solve(self: Task, job_id: str) -> None:
        dispatch(_orchestrator(self).start(job_id))

    @app.task(name="conductor.plan", bind=True, shared=False)
    def plan(self: Task, round_id: int) -> None:
        dispatch(_orchestrator(self).plan_round(round_id, self.request.hostname or ""))

    @app.task(name="conductor.replan", bind=True, shared=False)
    def replan(self: Task, round_id: int) -> None:
        # Same work as plan: the round's kind tells the orchestrator which prompt to use.
        dispatch(_orchestrator(self).plan_round(round_id, self.request.hostname or ""))

    @app.task(name="conductor.run_step", bind=True, shared=False)
    def run_step(self: Task, step_id: int) -> None:
        try:
            dispatch(_orchestrator(self).run_step(step_id, self.request.hostname or ""))
        except RateLimited as exc:
            # Free this worker slot instead of waiting: hand the step back and come back later.
            runtime.engine.release_step(step_id)
            raise self.retry(countdown=exc.retry_after, max_retries=None) from exc

    @app.task(name="conductor.finalize", bind=True, shared=False)
    def finalize(self: Task, job_id: str) -> None:
        if _orchestrator(self).finalize(job_id) and job_has_reference(runtime, job_id):
            app.send_task("conductor.score", args=[job_id], task_id=f"score-{job_id}")

    @app.task(name="conductor.reap", bind=True, shared=False)
    def reap(self: Task) -> None:
        dispatch(_orchestrator(self).recover())
