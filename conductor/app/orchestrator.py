"""What one task does: call the right model and hand the result to the engine.

No Celery here: tasks call these methods and send the `Effects` they return.
"""

from __future__ import annotations

from typing import Any

from conductor import log_context
from conductor.app.formatted_answer import formatted_answer, formatted_from_tool
from conductor.config.pool import Pool
from conductor.domain.answer_format import AnswerFormat
from conductor.domain.effects import Effects, RoundTask
from conductor.domain.errors import AnswerFormatError, ModelCallError, RateLimited
from conductor.domain.plan_grammar import PlanGrammar
from conductor.domain.prompts import build_step_messages
from conductor.domain.states import RoundKind
from conductor.engine import Engine, PlanRecord
from conductor.inference.completion import Completion
from conductor.inference.gateway import Gateway


class Orchestrator:
    def __init__(self, engine: Engine, gateway: Gateway, pool: Pool, *, answer_writer: str | None = None) -> None:
        self.engine = engine
        self.gateway = gateway
        self.pool = pool
        #: The worker asked first to write a formatted answer from a tool's result (`Pool.answer_writer`).
        self.answer_writer = answer_writer

    def start(self, job_id: str) -> Effects:
        return self.engine.start_job(job_id)

    def plan_round(self, round_id: int, host: str = "", requeue_after: float | None = None) -> Effects:
        """Call the Conductor for a round. With `requeue_after`, a provider that kept failing hands the
        round back to come again after that many seconds instead of failing it."""
        engine = self.engine
        task, ended = engine.lease_round(round_id, host)  # the lease and the call's budget: one transaction
        if task is None:
            return ended
        log_context.note_job(task.job_id)  # the message carried only the round id
        messages = self._plan_messages(task)
        try:
            c = self.gateway.call_conductor(messages, pin=task.policy, grammar=self._plan_grammar(task))
        except RateLimited:
            raise  # the task hands the round back and re-queues it
        except ModelCallError as exc:
            _requeue_if_transient(exc, requeue_after)
            return engine.fail_round(round_id, f"conductor call failed: {exc}")
        return engine.record_plan(round_id, PlanRecord(messages=messages, completion=c))

    def _plan_messages(self, task: RoundTask) -> list[dict[str, Any]]:
        cards, conductor = self.pool.cards(), self.pool.conductor
        if task.kind == RoundKind.REPLAN and task.previous is not None:
            return conductor.replan_messages(
                task.question,
                cards,
                previous=task.previous,
                previous_answer=task.previous_answer or "",
                max_steps=task.max_steps,
            )
        return conductor.plan_messages(task.question, cards, max_steps=task.max_steps)

    def _plan_grammar(self, task: RoundTask) -> PlanGrammar:
        """The plans the engine's parser will accept for this round, sized to the Conductor's token cap."""
        return self.pool.conductor.plan_grammar(
            len(self.pool.cards()), max_steps=task.max_steps, replan=task.kind == RoundKind.REPLAN
        )

    def run_step(self, step_id: int, host: str = "", requeue_after: float | None = None) -> Effects:
        """Run a step's model call; `requeue_after` as in `plan_round`."""
        engine, pool = self.engine, self.pool
        task, ended = engine.lease_step(step_id, host)  # the lease and the call's budget: one transaction
        if task is None:
            return ended
        log_context.note_job(task.job_id)  # the message carried only the step id
        if engine.runs_nested(task):
            return engine.start_nested(task)
        worker = None if pool.is_conductor_index(task.worker_index) else task.worker_name
        messages = build_step_messages(task.subtask, task.context)
        try:
            if task.answer_format is None:
                c = self._call(worker, messages)
            elif worker is not None and pool.worker(worker).is_tool:
                # A program cannot be asked for a format: a model writes the answer from its result.
                writer = pool.answer_writer(worker, self.answer_writer)
                c = formatted_from_tool(
                    lambda m: self._call(worker, m),
                    lambda m, fmt: self._call(writer, m, fmt),
                    task.question,
                    messages,
                    task.answer_format,
                )
            else:
                c = formatted_answer(lambda m, fmt: self._call(worker, m, fmt), messages, task.answer_format)
        except RateLimited:
            raise  # the task hands the step back and re-queues it; a limit is not a failure
        except ModelCallError as exc:
            _requeue_if_transient(exc, requeue_after)
            return engine.fail_step(step_id, str(exc))
        except AnswerFormatError as exc:
            return engine.fail_step(step_id, f"{task.worker_name}: {exc}")
        return engine.complete_step(
            step_id,
            c.text,
            model=f"{c.served_by}={c.model}" if c.served_by != task.worker_name else c.model,
            usage=c.usage(),
        )

    def _call(self, worker: str | None, messages: list[dict[str, Any]], fmt: AnswerFormat | None = None) -> Completion:
        """A worker's call (its fallbacks included), or with `worker` None the Conductor's as an ordinary
        worker (at the depth cap, for a formatted answer, or writing one for a pool of tools only)."""
        if worker is None:
            return self.gateway.call_spec(self.pool.conductor, messages, label="conductor", answer_format=fmt)
        return self.gateway.call_worker(worker, messages, answer_format=fmt)

    def finalize(self, job_id: str) -> Effects:
        """Close the job; a job whose problem has a reference is then scored."""
        return self.engine.close_job(job_id)

    def recover(self, waiting: Effects | None = None) -> Effects:
        """Lost pipeline work, and score tasks lost between finalize's commit and their sending;
        `waiting` is the work whose message a broker queue holds (None: the broker cannot tell)."""
        return self.engine.recover(waiting=waiting)


def _requeue_if_transient(exc: ModelCallError, requeue_after: float | None) -> None:
    """Turn a provider's transient failure (5xx, 429, timeouts through every retry and fallback) into a
    hand-back: a fault window of a few seconds must not fail the work (an unreachable server is not
    retryable: see `ModelServerUnreachable`)."""
    if requeue_after is not None and exc.retryable:
        raise RateLimited(f"provider failing, again in {requeue_after:g}s: {exc}", retry_after=requeue_after) from exc
