"""The hottest transitions' statements, built once with bound parameters.

Building a statement costs more CPU than running it: each `update(...).where(...).values(...)`
constructs clause objects, computes a cache key to find its compiled form, and a `case()` even
renders type reprs. A statement built once keeps its cache key memoised; each call binds values
only. Parameter names start with `p_` (a column's own name is reserved in a SET clause).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Integer,
    Select,
    Update,
    and_,
    any_,
    bindparam,
    case,
    exists,
    literal,
    select,
    true,
    update,
)

from conductor.domain.states import RoundStatus, StepStatus
from conductor.store.tables import chains, jobs, rounds, steps

S, R, J = steps.c, rounds.c, jobs.c
#: What a step's task needs from its own row.
STEP_TASK_COLUMNS = (
    S.round_id,
    S.job_id,
    S.step_index,
    S.worker_index,
    S.worker_name,
    S.subtask,
    S.access,
    S.dependencies,
)


def among(column: Any, name: str, postgres: bool) -> Any:
    """`column IN :name`: on PostgreSQL `= ANY(:name)`, one bound array (an expanding IN list is
    rendered anew on every execution)."""
    if postgres:
        return column == any_(bindparam(name, type_=ARRAY(BigInteger)))
    return column.in_(bindparam(name, expanding=True))


@cache
def release_successors(postgres: bool) -> Update:
    """Count one finished dependency off the steps `p_successors` of round `p_round`; those it
    leaves with none are ready (at `p_t`)."""
    last_dep = (S.pending_deps == 1) & (S.status == StepStatus.PENDING)
    return (
        update(steps)
        .where(S.round_id == bindparam("p_round"), among(S.step_index, "p_successors", postgres))
        .values(
            pending_deps=S.pending_deps - 1,
            status=case((last_dep, literal(StepStatus.READY, S.status.type)), else_=S.status),
            ready_at=case((last_dep, bindparam("p_t", type_=S.ready_at.type)), else_=S.ready_at),
        )
        .returning(S.id, S.pending_deps, S.status)
    )


#: Record a running step's output (`p_step`); returns where to count it.
COMPLETE_STEP = (
    update(steps)
    .where(S.id == bindparam("p_step"), S.status.in_([StepStatus.RUNNING, StepStatus.DELEGATED]))
    .values(
        status=StepStatus.DONE,
        output=bindparam("p_output", type_=S.output.type),
        model=bindparam("p_model", type_=S.model.type),
        prompt_tokens=bindparam("p_prompt_tokens", type_=S.prompt_tokens.type),
        completion_tokens=bindparam("p_completion_tokens", type_=S.completion_tokens.type),
        cost_usd=bindparam("p_cost_usd", type_=S.cost_usd.type),
        latency_s=bindparam("p_latency_s", type_=S.latency_s.type),
        finished_at=bindparam("p_t", type_=S.finished_at.type),
        lease_until=None,
    )
    .returning(S.round_id, S.step_index, S.job_id)
)

#: Count a finished step on its round `p_round` while the round runs.
COUNT_ON_ROUND = (
    update(rounds)
    .where(R.id == bindparam("p_round"), R.status == RoundStatus.RUNNING)
    .values(steps_done=R.steps_done + 1)
    .returning(R.steps_done, R.n_steps, R.workflow)
)

#: Add a call's tokens and cost to job `p_job`.
ADD_USAGE = (
    update(jobs)
    .where(J.id == bindparam("p_job"))
    .values(
        prompt_tokens=J.prompt_tokens + bindparam("p_prompt_tokens", type_=Integer),
        completion_tokens=J.completion_tokens + bindparam("p_completion_tokens", type_=Integer),
        cost_usd=J.cost_usd + bindparam("p_cost_usd", type_=J.cost_usd.type),
        cache_hits=J.cache_hits + bindparam("p_cache_hits", type_=Integer),
        cached_tokens=J.cached_tokens + bindparam("p_cached_tokens", type_=Integer),
        saved_usd=J.saved_usd + bindparam("p_saved_usd", type_=J.saved_usd.type),
    )
)

#: Room for one more model call under every budget (at most `p_max_calls` calls), and counting that
#: call on job `p_job`.
HAS_BUDGET = and_(
    J.model_calls < bindparam("p_max_calls", type_=Integer),
    J.budget_tokens.is_(None) | ((J.prompt_tokens + J.completion_tokens) < J.budget_tokens),
    J.budget_usd.is_(None) | (J.cost_usd < J.budget_usd),
)
RESERVE_CALL = update(jobs).where(J.id == bindparam("p_job"), HAS_BUDGET).values(model_calls=J.model_calls + 1)


def _leasing_step() -> Any:
    """Lease step `p_step` for `p_host` until `p_until` if it is ready or its lease ran out (at
    `p_t`), returning what its task needs from the step, its round and its chain (PostgreSQL)."""
    leasable = (S.status == StepStatus.READY) | ((S.status == StepStatus.RUNNING) & (S.lease_until < bindparam("p_t")))
    return (
        update(steps)
        .where(S.id == bindparam("p_step"), leasable, R.id == S.round_id, chains.c.id == R.chain_id)
        .values(
            status=StepStatus.RUNNING,
            attempts=S.attempts + 1,
            lease_holder=bindparam("p_host", type_=S.lease_holder.type),
            started_at=bindparam("p_t", type_=S.started_at.type),
            lease_until=bindparam("p_until", type_=S.lease_until.type),
        )
        .returning(
            *STEP_TASK_COLUMNS,
            R.status.label("round_status"),
            R.kind.label("round_kind"),
            R.chain_id,
            R.round_index,
            R.n_steps,
            chains.c.depth,
            chains.c.question,
        )
    )


@cache
def lease_step() -> Update:
    """PostgreSQL: `_leasing_step` alone (a claim that counts no call)."""
    stmt: Update = _leasing_step()
    return stmt


@cache
def lease_and_reserve_step() -> Select[Any]:
    """PostgreSQL: lease step `p_step` for `p_host` until `p_until` (if ready, or its lease ran out),
    read what its task needs from the step, its round and chain, and count the model call it will
    make on its job if every budget has room, in one statement.

    Rows are locked in the transitions' order: the step, then the job (the round and chain are
    read, not locked). No call is counted for a step whose round ended or that runs as a nested
    workflow (a Conductor-as-worker step, index `p_conductor_index`, below depth `p_max_depth`).
    `reserved` is false where a budget is spent (or no call was due).
    """
    leased = _leasing_step().cte("leased")
    nested = (leased.c.worker_index == bindparam("p_conductor_index", type_=Integer)) & (
        leased.c.depth < bindparam("p_max_depth", type_=Integer)
    )
    reserved = (
        update(jobs)
        .where(J.id == leased.c.job_id, HAS_BUDGET, leased.c.round_status == RoundStatus.RUNNING, ~nested)
        .values(model_calls=J.model_calls + 1)
        .returning(J.id)
        .cte("reserved")
    )
    return select(leased, exists(select(reserved.c.id)).label("reserved"))


@cache
def complete_and_count() -> Select[Any]:
    """PostgreSQL: `COMPLETE_STEP` and `COUNT_ON_ROUND` in one statement, locking the step, then its
    round. No row: the step was already recorded; `steps_done` NULL: its round no longer runs."""
    done = COMPLETE_STEP.cte("done")
    counted = (
        update(rounds)
        .where(R.id == done.c.round_id, R.status == RoundStatus.RUNNING)
        .values(steps_done=R.steps_done + 1)
        .returning(R.steps_done, R.n_steps, R.workflow)
        .cte("counted")
    )
    return select(done, counted).select_from(done.outerjoin(counted, true()))
