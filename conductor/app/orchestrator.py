"""What one plan, replan or step task does: call the right model and hand the result to the engine.

No Celery here: tasks call these methods and enqueue the `Effects` they return.
"""

from __future__ import annotations

from conductor.app.runtime import Runtime
from conductor.domain.effects import Effects
from conductor.domain.errors import RateLimited, WorkerCallError
from conductor.domain.prompts import build_plan_messages, build_replan_messages, build_step_messages
from conductor.domain.states import RoundKind


class Orchestrator:
    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime

    def start(self, job_id: str) -> Effects:
        return self.rt.engine.start_job(job_id)

    def plan_round(self, round_id: int, worker: str = "") -> Effects:
        engine, pool = self.rt.engine, self.rt.pool
        task = engine.claim_round(round_id, worker)
        if task is None:
            return Effects()
        refused = engine.reserve_call(task.job_id)
        if refused:
            return engine.fail_round(round_id, refused)
        max_steps = task.max_steps
        if task.kind == RoundKind.REPLAN and task.previous is not None:
            messages = build_replan_messages(
                task.question,
                pool.cards(),
                previous=task.previous,
                previous_answer=task.previous_answer or "",
                max_steps=max_steps,
            )
        else:
            messages = build_plan_messages(task.question, pool.cards(), max_steps=max_steps)
        try:
            c = self.rt.gateway.call_conductor(messages)
        except RateLimited:
            raise  # the task hands the round back and re-queues it
        except WorkerCallError as exc:
            return engine.fail_round(round_id, f"conductor call failed: {exc}")
        return engine.record_plan(
            round_id,
            messages=messages,
            text=c.text,
            token_ids=c.token_ids,
            logprobs=c.logprobs,
            prompt_token_ids=c.prompt_token_ids,
            model=c.model,
            policy_version=c.policy_version,
            sampling=c.sampling,
            prompt_tokens=c.prompt_tokens,
            completion_tokens=c.completion_tokens,
            cost_usd=c.cost_usd,
            latency_s=c.latency_s,
        )

    def run_step(self, step_id: int, worker: str = "") -> Effects:
        engine, pool = self.rt.engine, self.rt.pool
        task = engine.claim_step(step_id, worker)
        if task is None:
            return Effects()
        as_conductor = pool.is_conductor_index(task.worker_index)
        if as_conductor and task.depth < self.rt.settings.max_depth:
            return engine.start_nested(task)
        refused = engine.reserve_call(task.job_id)
        if refused:
            return engine.fail_step(step_id, refused)
        messages = build_step_messages(task.subtask, task.context)
        try:
            if as_conductor:
                # At the depth cap the Conductor answers directly, as an ordinary worker.
                c = self.rt.gateway.call_spec(pool.conductor, messages, label="conductor")
            else:
                c = self.rt.gateway.call_worker(task.worker_name, messages)
        except RateLimited:
            raise  # the task hands the step back and re-queues it; a limit is not a failure
        except WorkerCallError as exc:
            return engine.fail_step(step_id, str(exc))
        return engine.complete_step(
            step_id,
            c.text,
            model=f"{c.served_by}={c.model}" if c.served_by != task.worker_name else c.model,
            prompt_tokens=c.prompt_tokens,
            completion_tokens=c.completion_tokens,
            cost_usd=c.cost_usd,
            latency_s=c.latency_s,
        )

    def finalize(self, job_id: str) -> bool:
        return self.rt.engine.finalize(job_id)

    def recover(self) -> Effects:
        return self.rt.engine.recover()
