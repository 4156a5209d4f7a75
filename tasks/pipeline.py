"""The pipeline tasks: solve, plan, replan, run_step, finalize, reap. Each is a thin wrapper over
`conductor.app.orchestrator.Orchestrator`; what becomes runnable (scoring included) is sent by
`tasks.dispatch.Dispatcher`."""

from __future__ import annotations

from collections.abc import Callable

from celery import Celery, Task

from conductor.domain.effects import Effects
from conductor.domain.errors import RateLimited
from conductor.runtime import Runtime
from schedulers.broker import waiting_task_ids
from schedulers.feeder import Feeder, feeder_for
from schedulers.health import record_reaper_run
from tasks.batches import register_batches
from tasks.dispatch import Dispatcher, effects_of
from tasks.names import QUEUES, TaskName
from tasks.scoring import register_scoring
from tasks.training import register_training
from tasks.webhooks import notify_job, register_webhooks, resend_overdue


def requeue_after(runtime: Runtime, task: Task) -> float | None:
    """The countdown for handing `task`'s work back after a provider kept failing; None once spent."""
    # Counted with Celery's retries of this message, rate-limit hand-backs included: bounded either way.
    done = int(task.request.retries or 0)
    settings = runtime.settings
    return settings.provider_requeue_backoff_s * 2**done if done < settings.provider_requeues else None


def waiting_work(runtime: Runtime) -> Callable[[], Effects | None]:
    """The work whose messages wait in the broker's queues now; None where that cannot be read (the
    in-memory transport, or more messages than `broker_scan_limit`)."""
    probe = waiting_task_ids(runtime.settings.broker_url, QUEUES, limit=runtime.settings.broker_scan_limit)

    def read() -> Effects | None:
        ids = probe()
        return None if ids is None else effects_of(ids)

    return read


def register(app: Celery, runtime: Runtime) -> None:
    dispatch = Dispatcher(app)
    register_scoring(app, runtime)
    register_webhooks(app, runtime)
    register_training(app, runtime)
    register_batches(app, runtime, dispatch)
    waiting = waiting_work(runtime)
    _feeder: list[Feeder] = []

    def feeder() -> Feeder:
        if not _feeder:
            _feeder.append(feeder_for(runtime.sessions, runtime.settings, dispatch.submit))
        return _feeder[0]

    def _finish(job_ids: list[str]) -> None:
        for job_id in job_ids:
            dispatch(runtime.orchestrator.finalize(job_id))
            notify_job(app, runtime, job_id)  # after finalize's commit; once per job, if it has an endpoint
        if job_ids:
            feeder().maybe_admit()  # a slot freed: let a waiting job in (throttled per process)

    def _send(eff: Effects) -> None:
        # A job whose last chain just ended is closed here, by the task that ended it: no
        # finalize message and no hop to another host. If this host dies first, the job stays
        # running with no open chain and the reaper sends finalize (Recovery.recover).
        ended, eff.finalize = eff.finalize, []
        dispatch(eff)
        _finish(ended)

    @app.task(name=TaskName.SOLVE.value, bind=True, shared=False)
    def solve(self: Task, job_id: str) -> None:
        _send(runtime.orchestrator.start(job_id))

    def _until_admitted(task: Task, work: Callable[[], Effects], hand_back: Callable[[], None]) -> None:
        # Retries come from cluster rate limits and from providers failing for a while (max_retries=None
        # on these tasks; the orchestrator bounds the latter): the work goes back to the queue, freeing
        # this worker slot; it is never dropped, and real failures are recorded by the orchestrator.
        try:
            eff = work()
        except RateLimited as exc:
            hand_back()
            raise task.retry(countdown=exc.retry_after) from exc
        _send(eff)

    def _plan(task: Task, round_id: int) -> None:
        _until_admitted(
            task,
            lambda: runtime.orchestrator.plan_round(
                round_id, task.request.hostname or "", requeue_after(runtime, task)
            ),
            lambda: runtime.engine.release_round(round_id),
        )

    @app.task(name=TaskName.PLAN.value, bind=True, shared=False, max_retries=None)
    def plan(self: Task, round_id: int) -> None:
        _plan(self, round_id)

    @app.task(name=TaskName.REPLAN.value, bind=True, shared=False, max_retries=None)
    def replan(self: Task, round_id: int) -> None:
        # Same work as plan: the round's kind tells the orchestrator which prompt to use.
        _plan(self, round_id)

    @app.task(name=TaskName.RUN_STEP.value, bind=True, shared=False, max_retries=None)
    def run_step(self: Task, step_id: int) -> None:
        _until_admitted(
            self,
            lambda: runtime.orchestrator.run_step(step_id, self.request.hostname or "", requeue_after(runtime, self)),
            lambda: runtime.engine.release_step(step_id),
        )

    @app.task(name=TaskName.FINALIZE.value, bind=True, shared=False)
    def finalize(self: Task, job_id: str) -> None:
        _finish([job_id])  # sent by the reaper (a host lost before closing the job)

    @app.task(name=TaskName.REAP.value, bind=True, shared=False)
    def reap(self: Task) -> None:
        # Lost pipeline work, and score tasks lost between finalize's commit and their sending;
        # what waits in a queue is read first, so that no waiting message counts as lost.
        dispatch(runtime.orchestrator.recover(waiting()))
        resend_overdue(app, runtime)  # webhook attempts lost with their process
        feeder().admit()  # waiting batch jobs keep flowing when no client follows them
        record_reaper_run(runtime.settings.cluster_redis_url)  # read by `conductor status`
