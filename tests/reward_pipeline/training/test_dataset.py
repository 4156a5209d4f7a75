"""The dataset builder on a store filled by real pipeline runs (embedded queue, scripted models)."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import UTC, datetime

import pytest
from sqlalchemy import update

from conductor.app.service import JobSpec
from conductor.domain.problem import Problem
from conductor.store.models import Checkpoint, Round
from reward_pipeline.rewards import score_job
from reward_pipeline.training.dataset import TraceFilter, build_dataset
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import Reply, ScriptedLLMServer
from tests.support.system import embedded_system
from tests.support.workflows import block, question_of


def _script():
    """For each question, the first Conductor call plans and the second writes no plan; workers answer 42."""
    calls: Counter[str] = Counter()
    lock = threading.Lock()

    def script(model: str, messages: list[dict], body: dict) -> Reply:
        if model.endswith("scripted-conductor"):
            with lock:
                calls[question_of(messages)] += 1
                n = calls[question_of(messages)]
            return Reply("no plan here" if n % 2 == 0 else block("[0]", '["answer it"]', "[[]]"))
        return Reply("The answer is 42.")

    return script


@pytest.fixture
def filled(tmp_path):
    server = ScriptedLLMServer(_script(), prompt_token_ids=True).start()
    try:
        with embedded_system(tmp_path, scripted_pool(server.base_url), recursion=False, plan_retries=0) as sys:
            ids = []
            for i in range(3):
                job_id, _ = sys.service.submit(
                    Problem(id=f"p{i}", question=f"q{i}", answer="42", kind="math"), JobSpec(samples=2)
                )
                ids.append(job_id)
            eval_id, _ = sys.service.submit(
                Problem(question="qe", answer="42", kind="math"), JobSpec(samples=2, options={"eval": True})
            )
            sys.service.wait([*ids, eval_id], timeout=60, poll_s=0.05)
            for job_id in [*ids, eval_id]:
                score_job(sys.runtime.sessions, job_id)
            yield sys, ids
    finally:
        server.stop()


def _promote(sys, checkpoint_id: str) -> None:
    with sys.runtime.sessions.begin() as s:
        s.add(Checkpoint(id=checkpoint_id, base_model="b", status="retired", promoted_at=datetime.now(UTC)))


def test_the_samples_of_a_job_form_a_group_with_their_rewards_and_evaluation_jobs_are_left_out(filled):
    sys, ids = filled
    dataset = build_dataset(sys.runtime.sessions)

    assert len(dataset.groups) == 3
    assert {r.job_id for r in dataset.rows} == set(ids)
    assert dataset.excluded["evaluation_job"] == 2
    rewards = sorted(r.reward for r in dataset.rows)
    assert rewards == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]  # unparseable plans 0, parsed and right 1
    row = dataset.rows[0]
    assert len(row.completion_ids) == len(row.logprobs) > 0 and row.prompt_ids
    assert row.temperature == 1.0 and row.policy_version == "scripted-v0"
    stats = dataset.stats()
    assert stats["groups_zero_variance"] == 0 and stats["reward_histogram"] == {0.0: 3, 1.0: 3}


def test_the_staleness_filter_counts_promotions_since_the_rows_policy(filled):
    sys, _ = filled
    _promote(sys, "scripted-v0")
    assert len(build_dataset(sys.runtime.sessions, TraceFilter(max_staleness=0)).rows) == 6

    _promote(sys, "policy-2")  # one promotion later the rows are one version stale
    stale = build_dataset(sys.runtime.sessions, TraceFilter(max_staleness=0))
    assert stale.rows == [] and stale.excluded["too_stale"] == 6
    assert {r.staleness for r in build_dataset(sys.runtime.sessions, TraceFilter(max_staleness=1)).rows} == {1}


def test_rows_that_cannot_be_trained_on_faithfully_are_excluded_and_counted(filled):
    sys, ids = filled
    with sys.runtime.sessions.begin() as s:
        rounds = s.scalars(Round.__table__.select().where(Round.job_id == ids[0])).all()
        first, second = rounds[0], rounds[1]
        s.execute(update(Round).where(Round.id == first).values(completion_logprobs=[-0.5]))
        s.execute(
            update(Round).where(Round.id == second).values(sampling={"temperature": 1.0, "top_p": 0.9, "top_k": 0})
        )
    dataset = build_dataset(sys.runtime.sessions)

    assert dataset.excluded["ids_logprobs_length_mismatch"] == 1
    assert dataset.excluded["sampling_not_reproducible"] == 1
    assert len(dataset.rows) == 4


def test_a_filter_on_jobs_keeps_only_those_jobs(filled):
    sys, ids = filled
    dataset = build_dataset(sys.runtime.sessions, TraceFilter(job_ids=frozenset(ids[:1])))
    assert {r.job_id for r in dataset.rows} == {ids[0]}
