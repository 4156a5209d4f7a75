"""A worker's log names the job on every line it writes while running that job's tasks: Celery's
own outcome lines, the gateway's retry lines and the scorer's line, with several jobs running
at once on one process's threads, so a line naming the wrong job would show."""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import select

from conductor.config.settings import Settings
from conductor.domain.problem import Problem
from conductor.runtime import Runtime
from conductor.store.models import Round, Step
from conductor.system import service_for
from tasks.app import create_app
from tasks.dispatch import Dispatcher
from tests.support.cluster import cluster_env, workers, write_pool
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import Reply, ScriptedLLMServer
from tests.support.workflows import block, question_of

pytestmark = pytest.mark.services

JOB_LABEL = re.compile(r"\[job=(\w+)")
TASK_OUTCOME = re.compile(r"Task conductor\.\w+\[([\w-]+)\] (?:succeeded|retry|raised)")


def _script() -> Callable[[str, list[dict], dict], Reply]:
    """Plans that name their problem in each subtask; the first call for each problem's
    "part B" fails with a 500, so every job retries exactly one call."""
    failed: set[str] = set()
    lock = threading.Lock()

    def script(model: str, messages: list[dict], body: dict) -> Reply:
        text = question_of(messages)
        if model.endswith("scripted-conductor"):
            n = re.search(r"problem (\d+)", text).group(1)  # type: ignore[union-attr]
            return Reply(block("[0, 1, 0]", f'["part A of {n}", "part B of {n}", "combine"]', "[[], [], [0, 1]]"))
        last = messages[-1]["content"]
        with lock:
            if last.startswith("part B") and last not in failed:
                failed.add(last)
                return Reply(status=500, error="overloaded")
        return Reply("42", delay_s=0.05)

    return script


def _label(line: str) -> str | None:
    m = JOB_LABEL.search(line)
    return m.group(1) if m else None


def _wait_for_lines(log: Path, needles: list[str], timeout: float = 60.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        lines = log.read_text().splitlines()
        if all(any(n in line for line in lines) for n in needles) or time.monotonic() > deadline:
            return lines
        time.sleep(0.2)


def test_every_line_written_for_a_job_carries_its_id(tmp_path, pg_url, redis_db):
    server = ScriptedLLMServer(_script()).start()
    pool = scripted_pool(server.base_url, retries=1)
    env = cluster_env(tmp_path, redis_db, pg_url, write_pool(pool, tmp_path / "pool.yaml"), recursion="false")
    settings = Settings(home=tmp_path, broker_url=redis_db, database_url=pg_url)
    runtime = Runtime(settings, pool=pool)
    service = service_for(runtime, Dispatcher(create_app(settings, runtime)).submit)
    runtime.migrate()
    try:
        with workers(env, tmp_path, ["w1"], queues="conductor,llm,reward,default", concurrency=4):
            ids = [service.submit(Problem(question=f"[wf:fanout] problem {i}", answer="42"))[0] for i in range(3)]
            service.wait(ids, timeout=120)
            lines = _wait_for_lines(tmp_path / "w1.log", [f"scored job {job_id}" for job_id in ids])
    finally:
        server.stop()
    assert {service.job(job_id)["status"] for job_id in ids} == {"done"}

    task_ids: dict[str, str] = {}  # Celery task id -> the job it worked for
    with runtime.sessions() as s:
        for job_id in ids:
            rounds = s.scalars(select(Round.id).where(Round.job_id == job_id)).all()
            # The submitting process started the job (no solve task); the first root runs in the plan's
            # thread and the join in the thread of the step that released it (work first: no task of
            # their own): the steps sent are the other roots.
            roots = sorted(
                (st for st in s.scalars(select(Step).where(Step.job_id == job_id)) if not st.dependencies),
                key=lambda st: st.step_index,
            )
            steps = [st.id for st in roots[1:]]
            task_ids |= {f"score-{job_id}": job_id}
            task_ids |= {f"plan-{r}": job_id for r in rounds} | {f"step-{st}": job_id for st in steps}

    outcomes = {m.group(1): line for line in lines if (m := TASK_OUTCOME.search(line))}
    assert set(task_ids) <= set(outcomes), "every task of every job should have logged its outcome"
    wrong = [line for task_id, line in outcomes.items() if _label(line) != task_ids.get(task_id)]
    assert not wrong, "outcome lines without their job's id:\n" + "\n".join(wrong)

    retried = [line for line in lines if "beta: attempt 1: InternalServerError" in line and "retrying in" in line]
    assert Counter(_label(line) for line in retried) == dict.fromkeys(ids, 1)

    for job_id in ids:
        scored = [line for line in lines if f"scored job {job_id}" in line]
        assert len(scored) == 1 and _label(scored[0]) == job_id, scored
