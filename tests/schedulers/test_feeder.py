"""The feeder: bounded admission, weighted fair share across tenants, priorities, and a
5,000-problem batch submitted in bounded memory."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

from sqlalchemy import func, select, update

from conductor.app.service import Service
from conductor.config.settings import Settings
from conductor.runtime import Runtime
from conductor.store.models import Job, Tenant
from schedulers.feeder import WAITING, Feeder, FeederLimits, fair_shares
from tests.support.pools import scripted_pool


class Sent:
    def __init__(self) -> None:
        self.ids: list[str] = []

    def submit(self, job_ids: list[str]) -> None:
        self.ids += job_ids


def _runtime(tmp_path: Path) -> Runtime:
    rt = Runtime(Settings(home=tmp_path, broker_url="memory://"), pool=scripted_pool("http://127.0.0.1:9/v1"))
    rt.migrate()
    return rt


def _jobs(rt: Runtime, tenant: str, n: int, priority: int = 5) -> list[str]:
    with rt.sessions.begin() as s:
        if s.get(Tenant, tenant) is None:
            s.add(Tenant(id=tenant, name=tenant))
            s.flush()
        jobs = [Job(tenant_id=tenant, status=WAITING, problem={"question": "q"}, priority=priority) for _ in range(n)]
        s.add_all(jobs)
        s.flush()
        return [j.id for j in jobs]


def test_fair_shares_follow_weights_and_never_exceed_what_waits():
    assert fair_shares(8, {"a": 100, "b": 100}, {}, {"a": 3, "b": 1}) == {"a": 6, "b": 2}
    # b already has 4 in flight: a catches up first
    assert fair_shares(4, {"a": 100, "b": 100}, {"b": 4}) == {"a": 4}
    # an almost idle tenant's share goes to the others
    assert fair_shares(10, {"a": 1, "b": 100}, {}) == {"a": 1, "b": 9}
    assert fair_shares(0, {"a": 5}, {}) == {}


def test_admission_is_bounded_fair_and_by_priority(tmp_path):
    rt = _runtime(tmp_path)
    a_low = _jobs(rt, "a", 20, priority=1)
    a_high = _jobs(rt, "a", 3, priority=9)
    b = _jobs(rt, "b", 20)
    sent = Sent()
    feeder = Feeder(rt.sessions, sent.submit, limits=FeederLimits(max_in_flight=8, chunk=100), weights={"a": 3})
    r = feeder.admit()
    assert r.admitted == 8 and len(sent.ids) == 8
    assert set(a_high) <= set(sent.ids), "a's priority-9 jobs go before its priority-1 jobs"
    assert sum(i in a_low or i in a_high for i in sent.ids) == 6 and sum(i in b for i in sent.ids) == 2
    # nothing finished: nothing more is admitted
    assert feeder.admit().admitted == 0
    # two of b's finish: their slots are refilled, b is furthest below its share
    with rt.sessions.begin() as s:
        s.execute(update(Job).where(Job.id.in_([i for i in sent.ids if i in b])).values(status="done"))
    before = len(sent.ids)
    assert feeder.admit().admitted == 2
    assert all(i in b for i in sent.ids[before:])
    # a job is admitted once, however many feeders run
    other = Feeder(rt.sessions, sent.submit, limits=FeederLimits(max_in_flight=1000))
    other.admit()
    assert len(sent.ids) == len(set(sent.ids)) == 43
    with rt.sessions() as s:
        assert s.scalar(select(func.count()).where(Job.status == WAITING)) == 0
    rt.close()


def test_queue_depth_holds_admission_back(tmp_path):
    rt = _runtime(tmp_path)
    _jobs(rt, "a", 10)
    sent = Sent()
    depth = [40]
    # Room for 21 more messages; a new job is expected to bring 7 (solve, plan, max_steps=5 steps).
    feeder = Feeder(
        rt.sessions,
        sent.submit,
        limits=FeederLimits(max_queue_depth=61, max_in_flight=100, default_steps=5),
        queue_depth=lambda: depth[0],
    )
    assert feeder.admit().admitted == 3
    depth[0] = 100
    r = feeder.admit()
    assert r.admitted == 0 and r.skipped == "limits reached"
    rt.close()


def test_five_thousand_problems_stream_in_bounded_memory(tmp_path):
    n = 5000
    src = tmp_path / "big.jsonl"
    with src.open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"p{i}", "question": f"What is {i} + {i}? " + "context " * 40}) + "\n")
        fh.write("not json\n")
    rt = _runtime(tmp_path)
    sent = Sent()
    feeder = Feeder(
        rt.sessions, sent.submit, limits=FeederLimits(max_in_flight=300, chunk=300, max_queue_depth=100_000)
    )
    service = Service(rt.sessions, rt.settings, submit=sent.submit, admit=feeder.admit)
    tracemalloc.start()
    report = service.submit_batch(src, keep_ids=False, chunk=500)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert report.job_ids == [] and report.rejected[0]["line"] == n + 1
    # The file is ~1.8 MB and 5,000 Job objects took ~25 MB before streaming; one chunk is what may live.
    assert peak < 8 * 2**20, f"peak {peak / 2**20:.1f} MiB while submitting {n} problems"
    assert len(sent.ids) == 300, "admission is bounded: the rest wait in the store"
    assert service.batch_progress(report.batch_id) == (0, n)
    with rt.sessions() as s:
        assert s.scalar(select(func.count()).where(Job.batch_id == report.batch_id, Job.status == WAITING)) == n - 300
    lines = list(service.batch_result_lines(report.batch_id))
    assert [ln["line"] for ln in lines[:3]] == [1, 2, 3] and len(lines) == n
    rt.close()


def test_admission_counts_the_steps_admitted_jobs_will_still_release(tmp_path):
    """Five admitted jobs whose plans wrote three ready steps each owe the `llm` queue 15 messages,
    though the broker is empty: with room for 25 messages and 5 per new job (solve, plan, three
    steps as measured on those plans), two more jobs fit, not all twenty the empty broker suggests."""
    from conductor.store.models import Chain, Round, Step

    rt = _runtime(tmp_path)
    admitted = _jobs(rt, "a", 5)
    with rt.sessions.begin() as s:
        s.execute(update(Job).where(Job.id.in_(admitted)).values(status="running"))
        for job_id in admitted:
            chain = Chain(job_id=job_id, question="q", rounds_used=1)
            rnd = Round(chain=chain, job_id=job_id, round_index=0, kind="plan", status="running", n_steps=3)
            s.add(rnd)
            s.flush()
            s.add_all(
                Step(
                    round_id=rnd.id,
                    job_id=job_id,
                    step_index=i,
                    worker_index=0,
                    worker_name="alpha",
                    subtask="x",
                    access=[],
                    dependencies=[],
                    pending_deps=0,
                    status="ready",
                )
                for i in range(3)
            )
    waiting = _jobs(rt, "a", 20)
    sent = Sent()
    feeder = Feeder(rt.sessions, sent.submit, limits=FeederLimits(max_queue_depth=25), queue_depth=lambda: 0)
    report = feeder.admit()
    assert report.backlog == 15 and report.queue_depth == 0
    assert report.admitted == 2 and len(sent.ids) == 2 and set(sent.ids) <= set(waiting)
    # The two just admitted owe 2 x (solve + plan + 3 steps) more: nothing fits now.
    assert feeder.admit().admitted == 0
