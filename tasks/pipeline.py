"""The pipeline tasks: solve, plan, replan, run_step, finalize, reap. Each is a thin wrapper over
`conductor.app.orchestrator.Orchestrator`; what becomes runnable (scoring included) is sent by
`tasks.dispatch.Dispatcher`."""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property

from celery import Celery, Task

from conductor import telemetry
from conductor.domain.effects import Effects
from conductor.domain.errors import RateLimited
from conductor.runtime import Runtime
from schedulers.broker import waiting_task_ids
from schedulers.feeder import Feeder, feeder_for
from schedulers.health import record_reaper_run
from tasks import tracing
from tasks.batches import register_batches
from tasks.dispatch import Dispatcher, effects_of, set_message_parents, set_starter
from tasks.names import QUEUES, Queue, TaskName
from tasks.retention import register_retention
from tasks.scoring import register_scoring
from tasks.training import register_training
from tasks.webhooks import notify_job, register_webhooks, resend_overdue

#: Steps one task runs one after another in its own thread (each one a step the previous released),
#: before it sends the next as a message like any other.
MAX_INLINE_STEPS = 16


def requeue_after(runtime: Runtime, task: Task | None) -> float | None:
    """The countdown for handing `task`'s work back after a provider kept failing; None once spent.
    `task` None: work run inline, not yet handed back."""
    # Counted with Celery's retries of this message, rate-limit hand-backs included: bounded either way.
    done = int(task.request.retries or 0) if task is not None else 0
    settings = runtime.settings
    return settings.provider_requeue_backoff_s * 2**done if done < settings.provider_requeues else None


def waiting_work(runtime: Runtime) -> Callable[[], Effects | None]:
    """The work whose messages wait in the broker's queues now; None where that cannot be read (the
    in-memory transport, or more messages than `broker_scan_limit`)."""
    probe = waiting_task_ids(
        runtime.settings.broker_url, QUEUES, limit=runtime.settings.broker_scan_limit, links=runtime.settings.links
    )

    def read() -> Effects | None:
        ids = probe()
        return None if ids is None else effects_of(ids)

    return read


class Pipeline:
    """What the pipeline tasks share: send what became runnable, close ended jobs, run lone steps."""

    def __init__(self, app: Celery, runtime: Runtime) -> None:
        self.app = app
        self.runtime = runtime
        self.dispatch = Dispatcher(app)
        self.orchestrator = runtime.orchestrator
        self._feeder: Feeder | None = None

    @cached_property
    def runs_steps(self) -> bool:
        """Whether this process consumes the queue steps are sent to (a worker's `-Q`; every queue
        unless it names some)."""
        return Queue.LLM.value in self.app.amqp.queues.consume_from

    @property
    def feeder(self) -> Feeder:
        if self._feeder is None:
            self._feeder = feeder_for(self.runtime.sessions, self.runtime.settings, self.dispatch.submit)
        return self._feeder

    def finish(self, job_ids: list[str]) -> None:
        for job_id in job_ids:
            trace_it = telemetry.enabled() and tracing.job_open(self.runtime.sessions, job_id)
            self.dispatch(self.orchestrator.finalize(job_id))
            if trace_it:
                tracing.write_job_trace(self.runtime.sessions, job_id)
            notify_job(self.app, self.runtime, job_id)  # after finalize's commit; once per job, if it has an endpoint
        if job_ids:
            self.feeder.maybe_admit()  # a slot freed: let a waiting job in (throttled per process)

    def send(self, eff: Effects, host: str = "") -> None:
        """Send what became runnable, and run one released step here.

        A job whose last chain just ended is closed here, by the task that ended it: no finalize
        message and no hop to another host. If this host dies first, the job stays running with
        no open chain and the reaper sends finalize (Recovery.recover).

        Work first: of the steps this task released, one runs next in this thread, with no broker
        hop (this thread is free now; another may not be), and the others go to the queue for other
        threads. It is leased like a step a message brought, so if this host dies before that lease
        the step is ready and unsent, and after it the lease runs out: the reaper re-sends it either
        way. (Only one: the rest must not wait behind it in this thread while other slots are free.)
        Only on a host that takes steps from their queue anyway: one kept for Conductor calls keeps
        its threads for them.
        """
        for _ in range(MAX_INLINE_STEPS):
            ended, eff.finalize = eff.finalize, []
            mine = eff.steps.pop(0) if eff.steps and self.runs_steps else None
            self.dispatch(eff)
            self.finish(ended)
            if mine is None:
                return
            try:
                with tracing.inline_step(self.runtime.sessions, mine):
                    eff = self.orchestrator.run_step(mine, host, requeue_after(self.runtime, None))
            except RateLimited as exc:
                self.runtime.engine.release_step(mine)
                self.dispatch.later(Effects(steps=[mine]), exc.retry_after, handed_back=1)
                return
        self.dispatch(eff)  # a long chain: the rest goes through the queue

    def until_admitted(self, task: Task, work: Callable[[], Effects], hand_back: Callable[[], None]) -> None:
        # Retries come from cluster rate limits and from providers failing for a while (max_retries=None
        # on these tasks; the orchestrator bounds the latter): the work goes back to the queue, freeing
        # this worker slot; it is never dropped, and real failures are recorded by the orchestrator.
        try:
            eff = work()
        except RateLimited as exc:
            hand_back()
            raise task.retry(countdown=exc.retry_after) from exc
        self.send(eff, task.request.hostname or "")

    def plan(self, task: Task, round_id: int) -> None:
        def work() -> Effects:
            with tracing.work_span(self.runtime.sessions, task.name, round_id, tracing.message_parent(task)):
                return self.orchestrator.plan_round(
                    round_id, task.request.hostname or "", requeue_after(self.runtime, task)
                )

        self.until_admitted(task, work, lambda: self.runtime.engine.release_round(round_id))

    def run_step(self, task: Task, step_id: int) -> None:
        def work() -> Effects:
            with tracing.work_span(self.runtime.sessions, task.name, step_id, tracing.message_parent(task)):
                return self.orchestrator.run_step(
                    step_id, task.request.hostname or "", requeue_after(self.runtime, task)
                )

        self.until_admitted(task, work, lambda: self.runtime.engine.release_step(step_id))


def register(app: Celery, runtime: Runtime) -> None:
    register_scoring(app, runtime)
    register_webhooks(app, runtime)
    register_training(app, runtime)
    register_retention(app, runtime)
    pipe = Pipeline(app, runtime)
    register_batches(app, runtime, pipe.dispatch)
    # Whoever submits through this app starts the jobs itself: no solve hop (`Dispatcher.submit`).
    set_starter(app, runtime.engine.start_jobs)
    if telemetry.enabled():
        set_message_parents(app, tracing.message_parents(runtime.sessions))
    waiting = waiting_work(runtime)

    @app.task(name=TaskName.SOLVE.value, bind=True, shared=False)
    def solve(self: Task, job_id: str) -> None:
        # Sent only where a start could not run at submission (and by the reaper for a lost one).
        pipe.send(pipe.orchestrator.start(job_id), self.request.hostname or "")

    @app.task(name=TaskName.PLAN.value, bind=True, shared=False, max_retries=None)
    def plan(self: Task, round_id: int) -> None:
        pipe.plan(self, round_id)

    @app.task(name=TaskName.REPLAN.value, bind=True, shared=False, max_retries=None)
    def replan(self: Task, round_id: int) -> None:
        # Same work as plan: the round's kind tells the orchestrator which prompt to use.
        pipe.plan(self, round_id)

    @app.task(name=TaskName.RUN_STEP.value, bind=True, shared=False, max_retries=None)
    def run_step(self: Task, step_id: int) -> None:
        pipe.run_step(self, step_id)

    @app.task(name=TaskName.FINALIZE.value, bind=True, shared=False)
    def finalize(self: Task, job_id: str) -> None:
        pipe.finish([job_id])  # sent by the reaper (a host lost before closing the job)

    @app.task(name=TaskName.REAP.value, bind=True, shared=False)
    def reap(self: Task) -> None:
        # Lost pipeline work, and score tasks lost between finalize's commit and their sending;
        # what waits in a queue is read first, so that no waiting message counts as lost.
        pipe.dispatch(pipe.orchestrator.recover(waiting()))
        resend_overdue(app, runtime)  # webhook attempts lost with their process
        pipe.feeder.admit()  # waiting batch jobs keep flowing when no client follows them
        record_reaper_run(runtime.settings.cluster_redis_url, runtime.settings.links)  # read by `conductor status`
