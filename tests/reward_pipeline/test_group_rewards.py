"""Rewards without a reference: the group judge scores a job's samples, through the real pipeline.

Embedded Celery worker on SQLite, the scripted server as Conductor, workers and judge. The
Conductor plans one step whose subtask is the question; `[say-seq:A,B,C]` makes the samples
answer A, B, C; `[garble-first]` makes the first plan for a question unparseable (with no
resample, so that sample has no parseable plan at all).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import select

from conductor.app.service import JobSpec
from conductor.app.tenants import create_key
from conductor.domain.problem import Problem
from conductor.store.models import Judgement, Reward
from reward_pipeline.rewards import record_feedback
from reward_pipeline.training.dataset import TraceFilter, build_dataset
from tests.reward_pipeline.test_rewards import eval_script
from tests.support.judge import JUDGE_MODEL, judge_reply, judge_worker
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import Reply, ScriptedLLMServer
from tests.support.system import System, embedded_system

JudgeScript = Callable[[list[dict], int], Reply]


def fives_win(messages: list[dict], n: int) -> Reply:
    return judge_reply(messages, lambda answer: 1.0 if answer.rstrip().endswith("5") else 0.0)


def script_with(judge: JudgeScript) -> Callable[[str, list[dict], dict], Reply]:
    """test_rewards' Conductor and workers, plus the judge `judge(messages, n-th judge call)`."""
    workers, _ = eval_script()
    judged = [0]
    lock = threading.Lock()

    def script(model: str, messages: list[dict], body: dict) -> Reply:
        if model.endswith("scripted-judge"):
            with lock:
                judged[0] += 1
                n = judged[0]
            return judge(messages, n)
        return workers(model, messages, body)  # type: ignore[operator]

    return script


@contextmanager
def system(
    tmp_path: Path, judge: JudgeScript = fives_win, settings: dict | None = None, **judge_overrides: object
) -> Iterator[tuple[System, ScriptedLLMServer]]:
    server = ScriptedLLMServer(script_with(judge), prompt_token_ids=True).start()
    pool = scripted_pool(server.base_url, extra_workers=[judge_worker(server.base_url, **judge_overrides)])
    overrides = {"recursion": False, "plan_retries": 0, "judge_backoff_s": 0.05, **(settings or {})}
    try:
        with embedded_system(tmp_path, pool, **overrides) as sys:
            yield sys, server
    finally:
        server.stop()


def run_judged(sys: System, question: str, samples: int = 3, tenant_id: str | None = None) -> tuple[str, Judgement]:
    job_id, _ = sys.service.submit(Problem(question=question), JobSpec(samples=samples, tenant_id=tenant_id))
    sys.service.wait([job_id], timeout=60, poll_s=0.05)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with sys.runtime.sessions() as s:
            row = s.scalar(select(Judgement).where(Judgement.job_id == job_id))
            if row is not None:
                s.expunge(row)
                return job_id, row
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} was not judged within 30 s")


def rewards_of(sys: System, job_id: str) -> list[Reward]:
    with sys.runtime.sessions() as s:
        rows = list(s.scalars(select(Reward).where(Reward.job_id == job_id).order_by(Reward.id)))
        s.expunge_all()
        return rows


def test_a_job_without_a_reference_gets_one_judge_reward_per_sample_with_its_provenance(tmp_path: Path) -> None:
    with system(tmp_path) as (sys, server):
        job_id, judgement = run_judged(sys, "Pick a number [say-seq:5,7,9]")
        rewards = rewards_of(sys, job_id)
        usage = sys.service.usage()
        view = sys.service.job(job_id)
        judge_calls = server.calls_for(JUDGE_MODEL)

    assert judgement.status == "ok" and judgement.attempts == 1 and judgement.rubric_version == "group-v1"
    assert judgement.worker == "judge" and "scripted-judge" in (judgement.judge_model or "")
    assert sorted(judgement.order[0]) == [0, 1, 2] and len(judgement.chain_ids) == 3
    assert judgement.cost_usd > 0 and judgement.prompt_tokens > 0  # priced like any call
    assert [(r.source, r.verifier, r.rubric_version) for r in rewards] == [("judge", "group_judge", "group-v1")] * 3
    assert all(r.judge_model == judgement.judge_model for r in rewards)
    answers = {c["chain_id"]: c["answer"] for c in view["chains"]}
    # The judge's 1 and 0 land on the paper's scale: right 1, parsed but worse 0.5.
    assert {answers[r.chain_id]: r.value for r in rewards} == {
        "The answer is 5": 1.0, "The answer is 7": 0.5, "The answer is 9": 0.5,
    }  # fmt: skip
    assert len(judge_calls) == 1
    assert usage["judging"] == {"judgements": 1, "tokens": judgement.prompt_tokens + judgement.completion_tokens,
                                "cost_usd": judgement.cost_usd}  # fmt: skip
    assert usage["prompt_tokens"] + usage["completion_tokens"] == view["tokens"]  # the judge's are shown apart


def test_an_unparseable_sample_gets_the_papers_0_and_the_others_are_judged(tmp_path: Path) -> None:
    with system(tmp_path) as (sys, server):
        job_id, judgement = run_judged(sys, "[garble-first] Pick [say-seq:5,7]")
        rewards = rewards_of(sys, job_id)
        shown = server.calls_for(JUDGE_MODEL)[0].last_user

    by_source = Counter(r.source for r in rewards)
    assert by_source == {"judge": 2, "parse": 2}  # the chain's 0 and its round's 0
    assert all(r.value == 0.0 for r in rewards if r.source == "parse")
    assert len(judgement.chain_ids) == 2 and "Answer C" not in shown


def test_a_judge_answering_garbage_is_retried_then_recorded_as_failed_with_no_reward(tmp_path: Path) -> None:
    with system(tmp_path, judge=lambda m, n: Reply("They all look fine to me.")) as (sys, server):
        job_id, judgement = run_judged(sys, "Pick [say-seq:5,7]", samples=2)
        rewards = rewards_of(sys, job_id)
        calls = len(server.calls_for(JUDGE_MODEL))
        data = build_dataset(sys.runtime.sessions, TraceFilter(job_ids=frozenset({job_id})))

    assert judgement.status == "failed" and judgement.attempts == 3 == calls
    assert judgement.scores is None and "no JSON object" in (judgement.error or "")
    assert rewards == []  # a failed judgement is not a 0
    assert data.groups == [] and data.excluded["no_reward"] == 2


def test_a_rate_limited_then_slow_judge_is_retried_until_it_answers(tmp_path: Path) -> None:
    def flaky(messages: list[dict], n: int) -> Reply:
        if n == 1:
            return Reply(status=429, error="rate limited", headers={"retry-after": "0"})
        if n == 2:
            return Reply(delay_s=1.5)  # past the judge's 0.5 s timeout
        return fives_win(messages, n)

    with system(tmp_path, judge=flaky, timeout_s=0.5) as (sys, _):
        _, judgement = run_judged(sys, "Pick [say-seq:5,7]", samples=2)

    assert judgement.status == "ok" and judgement.attempts == 3 and len(judgement.order) == 3
    assert judgement.error is None and sorted(judgement.scores or []) == [0.0, 1.0]


def test_judge_prompts_never_carry_another_tenants_data(tmp_path: Path) -> None:
    with system(tmp_path) as (sys, server):
        _, acme = create_key(sys.runtime.sessions, "acme")
        _, globex = create_key(sys.runtime.sessions, "globex")
        questions = {acme: "ACME secret plan [say-seq:5,7]", globex: "GLOBEX merger memo [say-seq:5,9]"}
        results: dict[str, Judgement] = {}
        threads = [
            threading.Thread(target=lambda t=t, q=q: results.update({t: run_judged(sys, q, 2, t)[1]}))
            for t, q in questions.items()
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        prompts = [c.last_user for c in server.calls_for(JUDGE_MODEL)]

    assert {j.tenant_id for j in results.values()} == {acme, globex}
    assert len(prompts) == 2
    for prompt in prompts:
        assert ("ACME" in prompt) != ("GLOBEX" in prompt)
        assert not ("answer is 7" in prompt and "answer is 9" in prompt)


def test_the_dataset_filters_by_reward_source_and_feedback_replaces_the_judge_on_its_chain(tmp_path: Path) -> None:
    with system(tmp_path) as (sys, _):
        job_id, _ = run_judged(sys, "Pick [say-seq:5,7,9]")
        everything = build_dataset(sys.runtime.sessions)
        verifier_only = build_dataset(sys.runtime.sessions, TraceFilter(reward_sources=frozenset({"verifier"})))
        view = sys.service.job(job_id)
        answer_chain = next(c["chain_id"] for c in view["chains"] if c["answer"] == view["answer"])
        record_feedback(sys.runtime.sessions, job_id, "thumbs down")
        rated = build_dataset(sys.runtime.sessions)
        ignored = build_dataset(sys.runtime.sessions, TraceFilter(use_feedback=False))
        chain_of = {r["round_id"]: c["chain_id"] for c in view["chains"] for r in c["rounds"]}

    assert [len(g) for g in everything.groups] == [3] and {r.source for r in everything.rows} == {"judge"}
    assert everything.stats()["reward_by_source"]["judge"]["rows"] == 3
    assert verifier_only.groups == [] and verifier_only.excluded["source_judge"] == 3
    fed = {chain_of[r.round_id]: (r.source, r.reward) for r in rated.rows}
    assert fed[answer_chain] == ("feedback", 0.5)  # thumbs down on the chain the user saw
    assert sorted(v for c, v in fed.items() if c != answer_chain) == sorted(
        (r.source, r.reward) for r in everything.rows if chain_of[r.round_id] != answer_chain
    )  # the other samples keep the judge's
    assert {r.source for r in ignored.rows} == {"judge"}


@pytest.mark.slow
def test_smollm2_as_the_group_judge_gives_valid_scores_or_a_recorded_failure(tmp_path: Path) -> None:
    """The real local model judges (badly, at 135M): whatever it answers, the contract holds."""
    from conductor.config.pool import load_pool
    from tests.conftest import MODEL_HOME
    from tests.support.cluster import REPO

    (tmp_path / "models").symlink_to(MODEL_HOME / "models")
    pool = load_pool(REPO / "conductor" / "config" / "pools" / "local.yaml")
    pool.conductor.max_tokens = 160
    for w in pool.workers:
        w.max_tokens = 48
    overrides = {"recursion": False, "judge_worker": "smol-precise", "judge_backoff_s": 0.0, "judge_attempts": 2}
    with embedded_system(tmp_path, pool, **overrides) as sys:
        job_id, judgement = run_judged(sys, "Name one colour of the rainbow.", samples=2)
        rewards = [r for r in rewards_of(sys, job_id) if r.source == "judge"]

    assert judgement.worker == "smol-precise" and judgement.prompt_tokens > 0 and judgement.attempts >= 1
    if judgement.status == "ok":
        assert judgement.scores is not None and all(0.0 <= x <= 1.0 for x in judgement.scores)
        assert sorted(r.value for r in rewards) == sorted(0.5 + 0.5 * x for x in judgement.scores)
    else:
        assert judgement.attempts == 2 and judgement.error and rewards == []


def test_a_lost_judge_task_is_found_by_the_reaper_and_a_group_with_one_answer_is_recorded_as_skipped(
    tmp_path: Path,
) -> None:
    from sqlalchemy import delete

    from conductor.store import queries

    with system(tmp_path) as (sys, _):
        judged_id, _ = run_judged(sys, "Pick [say-seq:5,7]", samples=2)
        _, skipped = run_judged(sys, "[garble-first] Pick [say-seq:5]", samples=2)
        with sys.runtime.sessions() as s:
            before = queries.unjudged_jobs(s, older_than_s=0)
        with sys.runtime.sessions.begin() as s:  # as if the score task had been lost
            s.execute(delete(Reward).where(Reward.job_id == judged_id))
            s.execute(delete(Judgement).where(Judgement.job_id == judged_id))
        with sys.runtime.sessions() as s:
            lost = queries.unjudged_jobs(s, older_than_s=0)
        sys.app.send_task("conductor.score", args=lost)  # what the reaper's Effects(score) sends
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not rewards_of(sys, judged_id):
            time.sleep(0.1)
        rewards = rewards_of(sys, judged_id)

    assert before == [] and lost == [judged_id]
    assert skipped.status == "skipped" and skipped.attempts == 0 and "1 of 2 samples answered" in (skipped.error or "")
    assert sorted(r.source for r in rewards) == ["judge", "judge"]
