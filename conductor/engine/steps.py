"""Steps: lease one, run a Conductor-as-worker step as a nested chain, record its output or failure,
hand it back when a rate limit asks for later."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from conductor.domain.answer_format import AnswerFormat
from conductor.domain.effects import Effects, StepTask
from conductor.domain.prompts import expand_question
from conductor.domain.states import RoundKind, RoundStatus, StepStatus
from conductor.domain.usage import Usage
from conductor.engine import statements as sql
from conductor.engine.transitions import Transitions, now, updated
from conductor.store import queries
from conductor.store.models import Chain
from conductor.store.tables import chains, jobs, rounds, steps

PREVIOUS_ANSWER = "Previous round's final answer (to check or improve)"


def _writes_answer(step: Any, rnd: Any) -> bool:
    """The last step of a top-level round: its output is the job's answer (a nested chain's is a step's)."""
    return bool(rnd.depth == 0 and step.step_index == rnd.n_steps - 1)


class StepRules(Transitions):
    def claim_step(self, step_id: int, host: str = "") -> StepTask | None:
        """Lease a ready step (or one whose lease ran out) for the Celery host `host`."""
        with self.sessions.begin() as s:
            return self._claim_step(s, step_id, host)[0]

    def lease_step(self, step_id: int, host: str = "") -> tuple[StepTask | None, Effects]:
        """`claim_step` and, unless the step runs as a nested chain, `reserve_call`, in one transaction
        (on PostgreSQL in one statement).

        Returns the task to run, or None and what followed: another host holds the step, its
        round ended, or the job's budget is spent (the step then fails in this transaction).
        """
        with self.sessions.begin() as s:
            task, reserved = self._claim_step(s, step_id, host, reserve=True)
            if task is None or self.runs_nested(task) or reserved:
                return task, Effects()
            # PostgreSQL's statement counts no call for a Conductor-as-worker step below the depth cap;
            # one that writes a formatted answer is called directly after all, so its call is counted here.
            counted_later = reserved is None or self._below_depth_cap(task)
            spent = self._reserve(s, task.job_id) if counted_later else self._why_not_reserved(s, task.job_id)
            if spent is None:
                return task, Effects()
            return None, self._fail_step(s, step_id, str(spent))

    def runs_nested(self, task: StepTask) -> bool:
        """A Conductor-as-worker step below the depth cap runs as a nested chain (no model call here),
        unless it writes a formatted final answer: a nested chain's answer could not be decoded under it."""
        return self._below_depth_cap(task) and task.answer_format is None

    def _below_depth_cap(self, task: StepTask) -> bool:
        return self.pool.is_conductor_index(task.worker_index) and task.depth < self.settings.max_depth

    def _claim_step(
        self, s: Session, step_id: int, host: str, *, reserve: bool = False
    ) -> tuple[StepTask | None, bool | None]:
        """The leased step's task, and whether its model call was counted on the job (None: not
        asked, or not yet: SQLite counts it in a statement of its own, `_reserve`)."""
        t = now()
        until = t + timedelta(seconds=self.settings.step_lease_s)
        c = steps.c
        reserved: bool | None = None
        # The lease and everything the task needs from the step, its round and its chain (and with
        # `reserve`, the call counted on the job): one statement on PostgreSQL. SQLite's RETURNING
        # cannot name an UPDATE's FROM tables nor run in a CTE: there the round and chain are read
        # by a second statement. The dependencies' outputs (if any) follow.
        if self.postgres:
            params = {"p_step": step_id, "p_t": t, "p_until": until, "p_host": host}
            if reserve:
                index = len(self.pool.workers) if self.pool.conductor.in_pool else -1
                params |= {"p_conductor_index": index, "p_max_depth": self.settings.max_depth}
                got = s.execute(
                    sql.lease_and_reserve_step(), params | {"p_max_calls": self.settings.max_model_calls}
                ).first()
                reserved = bool(got.reserved) if got is not None else None
            else:
                got = s.execute(sql.lease_step(), params).first()
            if got is None:
                return None, None
            step = rnd = got
        else:
            lease = (
                update(steps)
                .where(
                    c.id == step_id,
                    (c.status == StepStatus.READY) | ((c.status == StepStatus.RUNNING) & (c.lease_until < t)),
                )
                .values(
                    status=StepStatus.RUNNING,
                    attempts=c.attempts + 1,
                    lease_holder=host,
                    started_at=t,
                    lease_until=until,
                )
            )
            leased = s.execute(lease.returning(*sql.STEP_TASK_COLUMNS)).first()
            if leased is None:
                return None, None
            step = leased
            rnd = s.execute(
                select(
                    rounds.c.status.label("round_status"),
                    rounds.c.kind.label("round_kind"),
                    rounds.c.chain_id,
                    rounds.c.round_index,
                    rounds.c.n_steps,
                    chains.c.depth,
                    chains.c.question,
                )
                .join_from(rounds, chains, chains.c.id == rounds.c.chain_id)
                .where(rounds.c.id == step.round_id)
            ).one()
        if rnd.round_status != RoundStatus.RUNNING:
            s.execute(update(steps).where(c.id == step_id).values(status=StepStatus.SKIPPED))
            return None, None
        context: list[tuple[str, str]] = []
        if step.dependencies:
            outputs = {
                i: (subtask, output or "")
                for i, subtask, output in s.execute(
                    select(c.step_index, c.subtask, c.output).where(
                        c.round_id == step.round_id, self._among(c.step_index, step.dependencies)
                    )
                )
            }
            context = [
                (expand_question(sub, rnd.question), out) for sub, out in (outputs[i] for i in step.dependencies)
            ]
        if step.access == "all" and rnd.round_kind == RoundKind.REPLAN:
            previous = queries.latest_answer_round(s, rnd.chain_id, before=rnd.round_index)
            if previous is not None:
                context.insert(0, (PREVIOUS_ANSWER, previous.answer or ""))
        task = StepTask(
            step_id=step_id,
            job_id=step.job_id,
            worker_index=step.worker_index,
            worker_name=step.worker_name,
            subtask=expand_question(step.subtask, rnd.question),
            context=context,
            depth=rnd.depth,
            answer_format=self._answer_format(s, step.job_id) if _writes_answer(step, rnd) else None,
            question=rnd.question,
        )
        return task, reserved

    def _answer_format(self, s: Session, job_id: str) -> AnswerFormat | None:
        options = s.scalar(select(jobs.c.options).where(jobs.c.id == job_id)) or {}
        fmt = options.get("answer_format")
        return AnswerFormat.from_options(fmt) if fmt else None

    def start_nested(self, task: StepTask) -> Effects:
        """Run a Conductor-as-worker step as a nested chain; its answer completes the step."""
        with self.sessions.begin() as s:
            # No lease while the child chain works: the child's own rounds and steps are leased. The
            # chain's end completes or fails the step (`_finish_chain`); the reaper leaves it alone.
            delegated = updated(
                s,
                update(steps)
                .where(steps.c.id == task.step_id, steps.c.status == StepStatus.RUNNING)
                .values(status=StepStatus.DELEGATED, lease_until=None),
            )
            if not delegated:
                return Effects()  # ended meanwhile (cancelled), or delegated by an earlier delivery
            chain = Chain(
                job_id=task.job_id,
                sample_index=0,
                parent_step_id=task.step_id,
                depth=task.depth + 1,
                question=task.nested_question,
            )
            s.add(chain)
            s.flush()
            return Effects(plans=[self._new_round(s, chain, RoundKind.PLAN).id])

    def complete_step(self, step_id: int, output: str, *, model: str | None = None, usage: Usage = Usage()) -> Effects:
        with self.sessions.begin() as s:
            return self._complete_step(s, step_id, output, model, usage)

    def fail_step(self, step_id: int, error: str) -> Effects:
        with self.sessions.begin() as s:
            return self._fail_step(s, step_id, error)

    def release_step(self, step_id: int) -> None:
        """Hand a claimed step back (a rate limit asked us to come back later).

        The claim's attempt and the model call it reserved are given back: waiting for a
        limit is not a lost step and spends none of the job's call budget.
        """
        with self.sessions.begin() as s:
            row = s.execute(
                update(steps)
                .where(steps.c.id == step_id, steps.c.status == StepStatus.RUNNING)
                .values(status=StepStatus.READY, lease_until=None, ready_at=now(), attempts=steps.c.attempts - 1)
                .returning(steps.c.job_id)
            ).first()
            if row is not None:
                s.execute(update(jobs).where(jobs.c.id == row[0]).values(model_calls=jobs.c.model_calls - 1))
