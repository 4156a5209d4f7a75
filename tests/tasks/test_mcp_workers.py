"""MCP tools as workers in real jobs: a scripted Conductor routes steps to `mcp/<server>/<tool>` workers and
the real pipeline runs them. The third-party time server answers over stdio in a worker process of a
Redis + PostgreSQL cluster; the test server answers over stdio and streamable HTTP in an embedded system.
A tool's error is the step's answer and the job ends; a server that dies is retried on a fresh process,
and one that stays dead hands the step to the worker's fallback."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from conductor.config.pool import Pool
from conductor.config.settings import Settings
from conductor.domain.mcp_tools import TOOL_ERROR_PREFIX
from conductor.domain.problem import Problem
from conductor.runtime import Runtime
from conductor.system import service_for
from tasks.app import create_app
from tasks.dispatch import Dispatcher
from tests.support.cluster import cluster_env, workers, write_pool
from tests.support.mcp_servers import TIME_SERVER, http_test_server, stdio_test_server
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import Reply, ScriptedLLMServer
from tests.support.system import embedded_system
from tests.support.workflows import block, question_of

TOOL = 2  #: the tool's "Model i" number: after the scripted pool's alpha and beta

#: The plan each question asks for, by a tag in it.
PLANS = {
    "[zone]": block(f"[{TOOL}]", '["Asia/Tokyo"]', "[[]]"),
    "[written]": block(f"[0, {TOOL}]", '["Write the call for Paris.", "Look it up."]', "[[], [0]]"),
    "[bad-zone]": block(f"[{TOOL}]", '["Nowhere/Land"]', "[[]]"),
    "[text]": block(f"[{TOOL}]", '["three little words"]', "[[]]"),
}


def _script(prompts: list[str]) -> Callable[[str, list[dict], dict], Reply]:
    lock = threading.Lock()

    def script(model: str, messages: list[dict], body: dict) -> Reply:
        if model.endswith("scripted-conductor"):
            with lock:
                prompts.append("\n".join(m["content"] for m in messages))
            question = question_of(messages)
            return Reply(next(plan for tag, plan in PLANS.items() if tag in question))
        return Reply('{"timezone": "Europe/Paris"}' if "Paris" in messages[-1]["content"] else "alpha answered")

    return script


def _steps(job: dict) -> list[dict]:
    return job["chains"][0]["rounds"][0]["steps"]


@pytest.mark.services
def test_the_time_server_answers_steps_in_a_worker_process_of_a_redis_and_postgres_cluster(tmp_path, pg_url, redis_db):
    prompts: list[str] = []
    server = ScriptedLLMServer(_script(prompts)).start()
    pool = scripted_pool(
        server.base_url,
        extra_workers=[{"name": "clock", "model": "mcp/time/get_current_time"}],
        mcp_servers={"time": TIME_SERVER},
    )
    env = cluster_env(tmp_path, redis_db, pg_url, write_pool(pool, tmp_path / "pool.yaml"), recursion="false")
    settings = Settings(home=tmp_path, broker_url=redis_db, database_url=pg_url, recursion=False)
    runtime = Runtime(settings, pool=pool)
    service = service_for(runtime, Dispatcher(create_app(settings, runtime)).submit)
    runtime.migrate()
    try:
        with workers(env, tmp_path, ["w1"], queues="conductor,llm,reward,default", concurrency=4):
            ids = [
                service.submit(Problem(question=f"{tag} What time is it?"))[0]
                for tag in ("[zone]", "[written]", "[bad-zone]")
            ]
            service.wait(ids, timeout=180)
            zone, written, bad_zone = (service.job(i) for i in ids)
    finally:
        server.stop()
        runtime.close()

    assert "Get current time in a specific timezone" in prompts[0], "the Conductor was shown the tool's description"
    assert "timezone (string, required)" in prompts[0]
    assert zone["status"] == "done", zone
    (step,) = _steps(zone)
    assert (step["worker"], step["tokens"]) == ("clock", 0)
    assert '"timezone": "Asia/Tokyo"' in step["output"] and "+09:00" in step["output"]
    write, look_up = _steps(written)
    assert write["output"] == '{"timezone": "Europe/Paris"}'
    assert '"timezone": "Europe/Paris"' in look_up["output"], "the tool took the arguments the step before wrote"
    assert bad_zone["status"] == "done", "a tool's error is an answer, not a failed job"
    (failed,) = _steps(bad_zone)
    assert failed["status"] == "done" and failed["output"].startswith(TOOL_ERROR_PREFIX)
    assert "Invalid timezone" in failed["output"] and bad_zone["answer"] == failed["output"]


def _solve_embedded(home: Path, pool_for: Callable[[str], Pool], tag: str, pg_url: str) -> dict:
    server = ScriptedLLMServer(_script([])).start()
    try:
        with embedded_system(home, pool_for(server.base_url), recursion=False, database_url=pg_url) as sys:
            job_id, _ = sys.service.submit(Problem(question=f"{tag} a question"))
            sys.service.wait([job_id], timeout=120)
            return sys.service.job(job_id)
    finally:
        server.stop()


@pytest.mark.services
def test_a_server_that_dies_mid_step_is_retried_on_a_fresh_process(tmp_path, pg_url):
    marker = tmp_path / "crashed"

    def pool_for(base_url: str) -> Pool:
        return scripted_pool(
            base_url,
            extra_workers=[{"name": "echo", "model": "mcp/t/crash_once", "retries": 1}],
            mcp_servers={"t": stdio_test_server(CRASH_MARKER=str(marker))},
        )

    job = _solve_embedded(tmp_path, pool_for, "[text]", pg_url)

    assert job["status"] == "done", job
    (step,) = _steps(job)
    crashed_pid = marker.read_text()
    assert step["output"].startswith("three little words (answered by ") and crashed_pid not in step["output"]


@pytest.mark.services
def test_a_server_that_stays_dead_hands_the_step_to_the_workers_fallback(tmp_path, pg_url):
    def pool_for(base_url: str) -> Pool:
        return scripted_pool(
            base_url,
            extra_workers=[{"name": "doomed", "model": "mcp/t/crash", "retries": 1, "fallback": "alpha"}],
            mcp_servers={"t": stdio_test_server()},
        )

    job = _solve_embedded(tmp_path, pool_for, "[text]", pg_url)

    assert job["status"] == "done", job
    (step,) = _steps(job)
    assert (step["worker"], step["output"]) == ("doomed", "alpha answered")
    assert step["model"] == "alpha=openai/scripted-worker-alpha", "the fallback served the step"


@pytest.mark.services
def test_a_streamable_http_server_answers_a_step(tmp_path, pg_url):
    with http_test_server(token="s3cret") as url:

        def pool_for(base_url: str) -> Pool:
            return scripted_pool(
                base_url,
                extra_workers=[{"name": "count", "model": "mcp/remote/word_count"}],
                mcp_servers={"remote": {"url": url, "headers": {"X-Test-Token": "s3cret"}}},
            )

        job = _solve_embedded(tmp_path, pool_for, "[text]", pg_url)

    assert job["status"] == "done", job
    (step,) = _steps(job)
    assert (step["worker"], step["output"]) == ("count", "3 words")
