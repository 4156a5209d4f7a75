"""Exploration: extra samples of an opted-in tenant's jobs after the answer, judged as one group.

Embedded worker on SQLite, scripted Conductor, workers and judge (see test_group_rewards). The
workers answer `[say-seq:...]` in turn, so the user's sample and the extra ones differ.
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

from sqlalchemy import select

from api.metrics import StoreCollector
from conductor.app.service import JobSpec
from conductor.app.tenant_jobs import TenantJobs
from conductor.app.tenants import create_key, set_exploration
from conductor.domain.problem import Problem
from conductor.store.models import Job, Judgement, Reward
from reward_pipeline.training.dataset import build_dataset
from tests.reward_pipeline.test_group_rewards import system
from tests.support.judge import JUDGE_MODEL
from tests.support.system import System


def chat(sys: System, question: str, tenant_id: str) -> str:
    job_id, _ = sys.service.submit(Problem(question=question), JobSpec(tenant_id=tenant_id, priority=9))
    sys.service.wait([job_id], timeout=60, poll_s=0.05)
    return job_id


def judgement_of(sys: System, job_id: str, timeout: float = 45.0) -> Judgement:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with sys.runtime.sessions() as s:
            row = s.scalar(select(Judgement).where(Judgement.job_id == job_id))
            if row is not None:
                s.expunge(row)
                return row
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} was not judged within {timeout}s")


def explorers_of(sys: System, job_id: str) -> list[Job]:
    with sys.runtime.sessions() as s:
        rows = list(s.scalars(select(Job).where(Job.explore_of == job_id)))
        s.expunge_all()
        return rows


def test_an_opted_in_tenants_job_gets_g_minus_1_samples_after_its_answer_judged_with_it(tmp_path: Path) -> None:
    with system(tmp_path, settings={"exploration_rate": 1.0, "exploration_samples": 3}) as (sys, _):
        _, acme = create_key(sys.runtime.sessions, "acme")
        set_exploration(sys.runtime.sessions, "acme", True)
        user_job = chat(sys, "Pick a number [say-seq:5,7,9]", acme)
        before = sys.service.job(user_job)
        judgement = judgement_of(sys, user_job)
        after = sys.service.job(user_job)
        (explorer,) = explorers_of(sys, user_job)
        with sys.runtime.sessions() as s:
            rewards = list(s.scalars(select(Reward).where(Reward.job_id.in_([user_job, explorer.id]))))
            by_job: dict[str, list[str]] = defaultdict(list)
            for r in rewards:
                by_job[r.job_id].append(r.source)
        data = build_dataset(sys.runtime.sessions)
        usage = sys.service.usage(tenant_id=acme)
        listed = [j.id for j in TenantJobs(sys.service, lambda *_: NotImplemented).list_jobs(acme).jobs]
        metrics = {
            (sample.name, sample.labels.get("purpose")): sample.value
            for family in StoreCollector(sys.runtime.sessions, sys.settings.broker_url).collect()
            if family.name.startswith("conductor_training_traffic")
            for sample in family.samples
        }

    assert (explorer.samples, explorer.priority, explorer.tenant_id) == (2, 1, acme)
    assert explorer.started_at is not None and before["finished_at"] is not None
    assert explorer.created_at.replace(tzinfo=None) >= _naive(before["finished_at"])  # after the user's answer
    assert judgement.status == "ok" and judgement.exploration and len(judgement.chain_ids) == 3
    assert by_job == {user_job: ["judge"], explorer.id: ["judge", "judge"]}
    assert (after["answer"], after["tokens"]) == (before["answer"], before["tokens"])  # the user's job is untouched
    assert [len(g) for g in data.groups] == [3] and {r.source for r in data.rows} == {"judge"}
    assert {r.job_id for r in data.rows} == {user_job, explorer.id}
    assert listed == [user_job]  # the tenant's job list shows only its own job
    assert usage["jobs"] == 1 and usage["prompt_tokens"] + usage["completion_tokens"] == before["tokens"]
    assert usage["exploration"]["jobs"] == 1 and usage["exploration"]["tokens"] > 0
    assert usage["judging"]["judgements"] == 1
    assert metrics[("conductor_training_traffic_tokens_total", "exploration")] == usage["exploration"]["tokens"]
    assert metrics[("conductor_training_traffic_tokens_total", "judging")] == usage["judging"]["tokens"] > 0


def test_opted_out_and_never_asked_tenants_get_no_exploration_and_no_judge_calls(tmp_path: Path) -> None:
    with system(tmp_path, settings={"exploration_rate": 1.0}) as (sys, server):
        _, globex = create_key(sys.runtime.sessions, "globex")
        _, initech = create_key(sys.runtime.sessions, "initech")
        set_exploration(sys.runtime.sessions, "globex", False)
        jobs = [chat(sys, "Pick [say-seq:5,7]", globex), chat(sys, "Choose [say-seq:5,7]", initech)]
        time.sleep(2.0)  # room for a wrongly sent score task and exploration job to show up
        explored = [j for job in jobs for j in explorers_of(sys, job)]
        judge_calls = server.calls_for(JUDGE_MODEL)
        with sys.runtime.sessions() as s:
            judgements = s.scalars(select(Judgement)).all()

    assert explored == [] and judge_calls == [] and judgements == []


def test_exploration_stops_for_the_day_once_its_budget_is_spent(tmp_path: Path) -> None:
    with system(tmp_path, settings={"exploration_rate": 1.0, "exploration_tokens_per_day": 1}) as (sys, _):
        _, acme = create_key(sys.runtime.sessions, "acme")
        set_exploration(sys.runtime.sessions, "acme", True)
        first = chat(sys, "Pick [say-seq:5,7]", acme)
        judgement_of(sys, first)  # the first exploration ran and spent more than 1 token
        second = chat(sys, "Choose [say-seq:5,7]", acme)
        time.sleep(2.0)

        assert len(explorers_of(sys, first)) == 1 and explorers_of(sys, second) == []


def _naive(iso: str):  # type: ignore[no-untyped-def]
    from datetime import datetime

    return datetime.fromisoformat(iso).replace(tzinfo=None)
