"""The hottest transitions' statements, built once with bound parameters.

Building a statement costs more CPU than running it: each `update(...).where(...).values(...)`
constructs clause objects, computes a cache key to find its compiled form, and a `case()` even
renders type reprs. A statement built once keeps its cache key memoised; each call binds values
only. Parameter names start with `p_` (a column's own name is reserved in a SET clause).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy import ARRAY, Integer, Update, and_, any_, bindparam, case, literal, update

from conductor.domain.states import RoundStatus, StepStatus
from conductor.store.tables import jobs, rounds, steps

S, R, J = steps.c, rounds.c, jobs.c


def among(column: Any, name: str, postgres: bool) -> Any:
    """`column IN :name`: on PostgreSQL `= ANY(:name)`, one bound array (an expanding IN list is
    rendered anew on every execution)."""
    if postgres:
        return column == any_(bindparam(name, type_=ARRAY(Integer)))
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
    )
)

#: Count one model call on job `p_job` if every budget has room (at most `p_max_calls` calls).
RESERVE_CALL = (
    update(jobs)
    .where(
        J.id == bindparam("p_job"),
        and_(
            J.model_calls < bindparam("p_max_calls", type_=Integer),
            J.budget_tokens.is_(None) | ((J.prompt_tokens + J.completion_tokens) < J.budget_tokens),
            J.budget_usd.is_(None) | (J.cost_usd < J.budget_usd),
        ),
    )
    .values(model_calls=J.model_calls + 1)
)
