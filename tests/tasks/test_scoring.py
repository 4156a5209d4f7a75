"""The `conductor.score` task: finalize enqueues it on the reward queue only when there is a
reference; it retries a verifier that failed; `conductor status` / `traces export` / `feedback`
show the rewards it wrote."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from celery.signals import after_task_publish
from typer.testing import CliRunner

from conductor.cli.main import app as cli
from conductor.domain.problem import Problem
from tasks import scoring
from tests.conftest import MODEL_HOME
from tests.reward_pipeline.test_rewards import eval_script, scripted_server, wait_scored
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import Reply, ScriptedLLMServer
from tests.support.system import embedded_system


@pytest.fixture
def published():
    """(task name, routing key) of every task message sent while the test runs."""
    sent: list[tuple[str, str]] = []

    def record(sender=None, headers=None, routing_key=None, **_):
        sent.append((sender, routing_key))

    after_task_publish.connect(record, weak=False)
    yield sent
    after_task_publish.disconnect(record)


def test_finalize_enqueues_score_on_the_reward_queue_only_when_the_problem_has_a_reference(tmp_path, published):
    with scripted_server() as srv, embedded_system(tmp_path, scripted_pool(srv.base_url), recursion=False) as sys:
        with_ref, _ = sys.service.submit(Problem(question="What is 4 + 4? [say:8]", answer="8"))
        without, _ = sys.service.submit(Problem(question="Say hello [say:hello]"))
        sys.service.wait([with_ref, without], timeout=60, poll_s=0.05)
        rewards = wait_scored(sys.runtime, with_ref)
        time.sleep(1.5)  # give a wrongly sent score task for the other job time to run
        other = sys.service.job(without)["rewards"]

    assert [(r.value, r.correct) for r in rewards] == [(1.0, True)]
    assert other == []
    scores = [(name, key) for name, key in published if name == "conductor.score"]
    assert scores == [("conductor.score", "reward")]


def test_a_failed_verification_is_retried_then_scored(tmp_path, monkeypatch):
    """A rubric problem judged by a pool worker named `judge` whose first call fails."""
    monkeypatch.setattr(scoring, "RETRY_BASE_S", 0.2)
    worker_script, _ = eval_script()
    judge_calls = []
    lock = threading.Lock()

    def script(model: str, messages: list[dict], body: dict) -> Reply:
        if model.endswith("scripted-judge"):
            with lock:
                judge_calls.append(messages)
                first = len(judge_calls) == 1
            return Reply(status=400, error="judge down") if first else Reply("Fine haiku.\nSCORE: 9")
        return worker_script(model, messages, body)

    server = ScriptedLLMServer(script).start()
    try:
        judge = {
            "name": "judge",
            "model": "openai/scripted-judge",
            "description": "grades answers",
            "api_base": server.base_url,
            "retries": 0,
            "timeout_s": 10.0,
        }
        pool = scripted_pool(server.base_url, extra_workers=[judge])
        with embedded_system(tmp_path, pool, recursion=False) as sys:
            job_id, _ = sys.service.submit(Problem(question="Write a haiku [say:autumn moon]", rubric="a haiku"))
            sys.service.wait([job_id], timeout=60, poll_s=0.05)
            rewards = wait_scored(sys.runtime, job_id, timeout=30)
    finally:
        server.stop()

    assert len(judge_calls) == 2
    assert "autumn moon" in judge_calls[-1][-1]["content"]
    assert [(r.value, r.correct, r.verifier) for r in rewards] == [(1.0, True, "judge")]


def test_status_traces_export_and_feedback_commands_show_the_rewards(tmp_path: Path, monkeypatch):
    with scripted_server() as srv, embedded_system(tmp_path, scripted_pool(srv.base_url), recursion=False) as sys:
        job_id, _ = sys.service.submit(Problem(question="[garble-first] What is 9 - 2? [say:7]", answer="7"))
        sys.service.wait([job_id], timeout=60, poll_s=0.05)
        wait_scored(sys.runtime, job_id)

    # The CLI reads the same home; a models link keeps it from pulling the local model.
    (tmp_path / "models").symlink_to(MODEL_HOME / "models")
    monkeypatch.setenv("CONDUCTOR_HOME", str(tmp_path))
    runner = CliRunner()
    status = runner.invoke(cli, ["status", job_id])
    assert status.exit_code == 0, status.output
    view = json.loads(status.stdout)
    assert sorted(r["value"] for r in view["rewards"]) == [0.0, 1.0]

    out = tmp_path / "traces.jsonl"
    exported = runner.invoke(cli, ["traces", "export", "--out", str(out)])
    assert exported.exit_code == 0, exported.output
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(ln["parse_status"], ln["reward"]["value"]) for ln in lines] == [("failed", 0.0), ("ok", 1.0)]

    fb = runner.invoke(cli, ["feedback", job_id, "down"])
    assert fb.exit_code == 0, fb.output
    assert json.loads(fb.stdout)["correct"] is False
    bad = runner.invoke(cli, ["feedback", job_id, "maybe?"])
    assert bad.exit_code == 3
    again = json.loads(runner.invoke(cli, ["status", job_id]).stdout)
    assert [r["source"] for r in again["rewards"]].count("feedback") == 1


def test_the_reaper_resends_a_score_task_that_was_lost(tmp_path):
    """A finished job with a reference and no reward (its score message lost) gets scored by reap."""
    import time

    from reward_pipeline.rewards import unscored_jobs
    from tests.conftest import default_script
    from tests.support.pools import scripted_pool
    from tests.support.scripted_llm import ScriptedLLMServer
    from tests.support.system import embedded_system

    server = ScriptedLLMServer(default_script()).start()
    try:
        with embedded_system(tmp_path, scripted_pool(server.base_url), recursion=False, ready_grace_s=0.1) as sys:
            job_id, _ = sys.service.submit(Problem(question="[wf:single] 2+2?", answer="4"))
            sys.service.wait([job_id], timeout=30)
            deadline = time.monotonic() + 20
            while not sys.service.job(job_id)["rewards"] and time.monotonic() < deadline:
                time.sleep(0.1)
            # Simulate the lost message: drop the rewards the score task wrote.
            from sqlalchemy import delete

            from conductor.store.models import Reward

            with sys.runtime.sessions.begin() as s:
                s.execute(delete(Reward).where(Reward.job_id == job_id))
            time.sleep(0.2)
            assert unscored_jobs(sys.runtime.sessions, older_than_s=0.1) == [job_id]
            sys.app.send_task("conductor.reap")
            deadline = time.monotonic() + 20
            while not sys.service.job(job_id)["rewards"] and time.monotonic() < deadline:
                time.sleep(0.1)
            assert sys.service.job(job_id)["rewards"], "reap should have re-sent the score task"
            assert unscored_jobs(sys.runtime.sessions, older_than_s=0.1) == []
    finally:
        server.stop()
