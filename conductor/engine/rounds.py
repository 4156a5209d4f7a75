"""Conductor rounds: lease a planning round, record the Conductor's completion and what it parsed
to (a workflow, an accept, or nothing usable), fail or hand a round back."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from conductor.domain.effects import Effects, RoundTask
from conductor.domain.errors import PlanParseError
from conductor.domain.parser import parse_workflow
from conductor.domain.states import ChainStatus, ParseStatus, RoundKind, RoundStatus
from conductor.domain.usage import Usage
from conductor.domain.workflow import Workflow
from conductor.engine.transitions import Transitions, now
from conductor.store import queries
from conductor.store.models import Round
from conductor.store.tables import chains, jobs, rounds

if TYPE_CHECKING:
    from conductor.inference.completion import Completion


@dataclass(frozen=True)
class PlanRecord:
    """One Conductor call as a round stores it: the prompt sent and the gateway's completion.

    The completion carries the policy version and sampling settings fixed at call time (the
    pool's Conductor may have been switched to a new checkpoint while the call was in flight).
    """

    messages: list[dict[str, Any]]
    completion: Completion

    @property
    def usage(self) -> Usage:
        return self.completion.usage()


class RoundRules(Transitions):
    def claim_round(self, round_id: int, host: str = "") -> RoundTask | None:
        """Lease a planning round; None if another Celery host holds it or it already ended."""
        with self.sessions.begin() as s:
            return self._claim_round(s, round_id)

    def lease_round(self, round_id: int, host: str = "") -> tuple[RoundTask | None, Effects]:
        """`claim_round` and `reserve_call` in one transaction: the task to run, or None and what
        followed (another host holds the round, or the job's budget is spent and the round failed)."""
        with self.sessions.begin() as s:
            task = self._claim_round(s, round_id)
            if task is None:
                return None, Effects()
            spent = self._reserve(s, task.job_id)
            if spent is None:
                return task, Effects()
            return None, self._fail_round(s, round_id, str(spent))

    def _claim_round(self, s: Session, round_id: int) -> RoundTask | None:
        t = now()
        c = rounds.c
        lease = (
            update(rounds)
            .where(
                c.id == round_id,
                c.status == RoundStatus.PLANNING,
                (c.lease_until.is_(None)) | (c.lease_until < t),
            )
            .values(attempts=c.attempts + 1, lease_until=t + timedelta(seconds=self.settings.step_lease_s))
        )
        mine = (c.job_id, c.kind, c.chain_id, c.round_index)
        # As `_claim_step`: the chain's question and the job's options in the same statement on PostgreSQL.
        if self.postgres:
            got = s.execute(
                lease.where(chains.c.id == c.chain_id, jobs.c.id == c.job_id).returning(
                    *mine, chains.c.question, jobs.c.options
                )
            ).first()
            if got is None:
                return None
            job_id, kind, chain_id, round_index, question, options = got
        else:
            claimed = s.execute(lease.returning(*mine)).first()
            if claimed is None:
                return None
            job_id, kind, chain_id, round_index = claimed
            question, options = s.execute(
                select(chains.c.question, jobs.c.options)
                .join_from(chains, jobs, jobs.c.id == chains.c.job_id)
                .where(chains.c.id == chain_id)
            ).one()
        previous = queries.latest_answer_round(s, chain_id, before=round_index) if kind == RoundKind.REPLAN else None
        return RoundTask(
            round_id=round_id,
            job_id=job_id,
            kind=RoundKind(kind),
            max_steps=self._max_steps_of(options),
            question=question,
            previous=Workflow.from_lists(**(previous.workflow or {})) if previous else None,
            previous_answer=previous.answer if previous else None,
            policy=_pinned_policy(options),
        )

    def record_plan(self, round_id: int, plan: PlanRecord) -> Effects:
        """Store the Conductor's completion on its round and act on what it parsed to."""
        with self.sessions.begin() as s:
            # Locked before its status is read: a cancel that ends the round meanwhile must not be
            # overwritten by this plan's steps (the round's later writes are unguarded ORM flushes).
            rnd = s.get_one(Round, round_id, with_for_update={"key_share": True})
            if rnd.status != RoundStatus.PLANNING:
                return Effects()  # a duplicate delivery: the first one recorded this round
            self._store_completion(s, rnd, plan)
            try:
                workflow = parse_workflow(
                    plan.completion.text,
                    pool_size=len(self.pool.cards()),
                    max_steps=self._max_steps(rnd.chain.job),
                    allow_empty=rnd.kind == RoundKind.REPLAN,
                )
            except PlanParseError as exc:
                rnd.parse_status, rnd.parse_error = ParseStatus.FAILED, str(exc)
                rnd.status, rnd.finished_at = RoundStatus.UNPARSEABLE, now()
                return self._after_unparseable(s, rnd)
            if workflow.is_empty:
                rnd.parse_status, rnd.status, rnd.finished_at = (
                    ParseStatus.ACCEPT,
                    RoundStatus.ACCEPTED,
                    now(),
                )
                return self._keep_previous_answer(s, rnd)
            rnd.parse_status = ParseStatus.OK
            return Effects(steps=self._start_workflow(s, rnd, workflow))

    def fail_round(self, round_id: int, error: str) -> Effects:
        """The Conductor call itself failed (after retries) or the budget ran out."""
        with self.sessions.begin() as s:
            return self._fail_round(s, round_id, error)

    def _fail_round(self, s: Session, round_id: int, error: str) -> Effects:
        ended = s.execute(
            update(rounds)
            .where(rounds.c.id == round_id, rounds.c.status == RoundStatus.PLANNING)
            .values(status=RoundStatus.FAILED, error=error, finished_at=now(), lease_until=None)
            .returning(rounds.c.chain_id)
        ).first()
        if ended is None:
            return Effects()
        return self._end_chain_after_failure(s, ended[0], error)

    def release_round(self, round_id: int) -> None:
        """Hand a leased planning round back (its Conductor call hit a limit); refund the call."""
        with self.sessions.begin() as s:
            row = s.execute(
                update(rounds)
                .where(rounds.c.id == round_id, rounds.c.status == RoundStatus.PLANNING)
                .values(lease_until=None, attempts=rounds.c.attempts - 1, sent_at=now())  # the retry is a send
                .returning(rounds.c.job_id)
            ).first()
            if row is not None:
                s.execute(update(jobs).where(jobs.c.id == row[0]).values(model_calls=jobs.c.model_calls - 1))

    def _store_completion(self, s: Session, rnd: Round, plan: PlanRecord) -> None:
        c = plan.completion
        rnd.prompt_messages = plan.messages
        rnd.prompt_token_ids = c.prompt_token_ids
        rnd.completion_text = c.text
        rnd.completion_token_ids = c.token_ids
        rnd.completion_logprobs = c.logprobs
        rnd.conductor_model = c.model
        rnd.policy_version = c.policy_version
        rnd.sampling = c.sampling
        rnd.prompt_tokens, rnd.completion_tokens, rnd.cost_usd = c.prompt_tokens, c.completion_tokens, c.cost_usd
        rnd.latency_s = c.latency_s
        rnd.lease_until = None
        self._add_usage(s, rnd.job_id, plan.usage)

    def _after_unparseable(self, s: Session, rnd: Round) -> Effects:
        """Resample the plan, else run the pool's fallback worker, else fail the chain."""
        if rnd.kind == RoundKind.REPLAN:
            return self._keep_previous_answer(s, rnd)  # a garbled replan keeps the chain's answer
        chain = rnd.chain
        failures = sum(1 for r in chain.rounds if r.status == RoundStatus.UNPARSEABLE)
        if failures <= self.settings.plan_retries and chain.rounds_used < self.settings.max_rounds:
            return Effects(plans=[self._new_round(s, chain, RoundKind.PLAN).id])
        fallback = self._start_fallback(s, chain)
        if fallback is not None:
            return fallback
        return self._finish_chain(
            s, chain.id, ChainStatus.FAILED, error=f"no valid plan after {failures} attempts: {rnd.parse_error}"
        )


def _pinned_policy(options: dict[str, Any] | None) -> tuple[str, str] | None:
    pin = (options or {}).get("policy")
    return (str(pin["version"]), str(pin["adapter"])) if isinstance(pin, dict) and "version" in pin else None
