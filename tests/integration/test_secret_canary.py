"""Secrets: a canary API key in a provider's environment variable is sent to the provider and
appears nowhere else: not in stdout/stderr of the CLI (with verbose logs and workflows), not in
result lines, traces, job views, error messages, nor any file under the home folder (the
SQLite database and logs included), even when the provider answers with an error; and on a
cluster, in nothing that went through Redis: no Celery message (headers with the `argsrepr` and
`kwargsrepr` Flower shows, and bodies), no task event Flower reads, no stored result."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
import yaml

from conductor.config.pool import Pool
from conductor.config.settings import Settings
from conductor.domain.problem import Problem
from conductor.runtime import Runtime
from conductor.system import service_for
from tasks.app import create_app
from tasks.dispatch import Dispatcher
from tasks.names import TaskName
from tests.support.cluster import cluster_env, workers, write_pool
from tests.support.scripted_llm import Reply, ScriptedLLMServer
from tests.support.workflows import conductor_reply

ROOT = Path(__file__).resolve().parents[2]
KEY_VAR = "CONDUCTOR_TEST_CANARY_KEY"


def _script(model: str, messages: list[dict], body: dict) -> Reply:
    if model.endswith("scripted-conductor"):
        return conductor_reply(messages)
    if model.endswith("beta"):  # a provider that rejects the key, with its usual error text
        return Reply(status=401, error="Incorrect API key provided. You can find your API key at https://example")
    return Reply("The answer is 42.")


def _pool(base_url: str) -> dict:
    """Every model's key comes from the canary's variable."""
    common = {"api_base": base_url, "api_key_env": KEY_VAR, "retries": 0, "timeout_s": 10}
    return {
        "conductor": {"model": "openai/scripted-conductor", "policy_version": "canary", **common},
        "workers": [
            {"name": "alpha", "model": "openai/scripted-worker-alpha", "description": "generalist", **common},
            {"name": "beta", "model": "openai/scripted-worker-beta", "description": "checker", **common},
        ],
    }


def test_a_canary_key_never_leaves_the_provider_call(tmp_path):
    canary = f"sk-canary-{uuid.uuid4().hex}"
    server = ScriptedLLMServer(_script).start()
    try:
        (tmp_path / "pool.yaml").write_text(yaml.safe_dump(_pool(server.base_url)))
        problems = tmp_path / "problems.jsonl"
        problems.write_text(
            json.dumps({"id": "ok", "question": "What is 6 * 7? [wf:fanout]", "answer": "42"}) + "\n"
            + json.dumps({"id": "bad", "question": "What is 1 + 1? [wf:fanout]", "answer": "2"}) + "\n"
            + "not json at all\n"
        )  # fmt: skip
        home = tmp_path / "home"
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONDUCTOR_")}
        env |= {
            KEY_VAR: canary,
            "CONDUCTOR_HOME": str(home),
            "CONDUCTOR_POOL_FILE": str(tmp_path / "pool.yaml"),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_LOG": "DEBUG",
        }
        outputs = []
        for args in (
            ["run", str(problems), "--out", str(tmp_path / "results.jsonl"), "--show-workflows"],
            ["traces", "export", "--out", str(tmp_path / "traces.jsonl"), "--include-eval"],
            ["usage"],
            ["status"],
        ):
            done = subprocess.run([sys.executable, "-m", "conductor.cli.main", *args], check=False, cwd=ROOT,
                                  env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
            assert done.returncode == 0, done.stderr[-3000:]
            outputs.append(done.stdout + done.stderr)
        results = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
        job_id = next(r["job_id"] for r in results if r["id"] == "ok")
        view = subprocess.run([sys.executable, "-m", "conductor.cli.main", "status", job_id], check=False, cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
        outputs.append(view.stdout + view.stderr)
    finally:
        server.stop()

    # The canary was really in play: the provider received it.
    assert server.calls and all(c.headers.get("authorization") == f"Bearer {canary}" for c in server.calls)
    assert {r["id"] for r in results} == {"ok", "bad"} and any(c.status == 401 for c in server.calls)
    leaks = [f"CLI output #{i}" for i, text in enumerate(outputs) if canary in text]
    for path in [tmp_path / "results.jsonl", tmp_path / "traces.jsonl", *home.rglob("*")]:
        if path.is_file() and canary.encode() in path.read_bytes():
            leaks.append(str(path))
    assert not leaks, f"the canary key leaked into: {leaks}"


@contextmanager
def _redis_monitor(url: str) -> Iterator[list[str]]:
    """Every command sent to `url`'s Redis database while the block runs (Redis MONITOR): each
    message a publisher pushed, each event published, each key set."""
    client = redis.Redis.from_url(url, socket_timeout=None)  # its default 5 s would end a quiet monitor
    db = client.connection_pool.connection_kwargs.get("db", 0)
    commands: list[str] = []
    ready, stop = threading.Event(), threading.Event()

    def record() -> None:
        with client.monitor() as monitor:
            ready.set()
            while not stop.is_set():
                try:
                    seen = monitor.next_command()
                except (AttributeError, ValueError):  # a line redis-py cannot parse (another database's)
                    continue
                if seen["db"] == db:
                    commands.append(seen["command"])

    thread = threading.Thread(target=record, daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield commands
    finally:
        stop.set()
        client.ping()  # any command wakes the monitor up to see `stop`
        thread.join(timeout=10)
        client.close()


def _bodies(commands: list[str]) -> list[str]:
    """The base64 bodies of the kombu envelopes in `commands` (task messages and events), decoded."""
    found = re.findall(r'"body": ?"([A-Za-z0-9+/=]*)"', "\n".join(commands))
    return [base64.b64decode(b).decode("utf-8", "replace") for b in found]


@pytest.mark.services
def test_a_canary_key_is_in_no_celery_message_event_or_result_of_a_cluster(tmp_path, pg_url, redis_db, monkeypatch):
    canary = f"sk-canary-{uuid.uuid4().hex}"
    monkeypatch.setenv(KEY_VAR, canary)  # the submitting process has the key too
    server = ScriptedLLMServer(_script).start()
    pool = Pool.model_validate(_pool(server.base_url))
    # Task events on, as Flower turns them on: their arguments are what its task pages show.
    env = cluster_env(tmp_path, redis_db, pg_url, write_pool(pool, tmp_path / "pool.yaml"), recursion="false",
                      task_events="true")  # fmt: skip
    settings = Settings(home=tmp_path, broker_url=redis_db, database_url=pg_url, task_events=True)
    runtime = Runtime(settings, pool=pool)
    app = create_app(settings, runtime)
    service = service_for(runtime, Dispatcher(app).submit)
    runtime.migrate()
    try:
        with (
            _redis_monitor(redis_db) as commands,
            workers(env | {KEY_VAR: canary}, tmp_path, ["w1"], queues="conductor,llm,reward,default"),
        ):
            ok, _ = service.submit(Problem(question="What is 6 * 7? [wf:fanout0]", answer="42"))  # parallel steps: sent
            bad, _ = service.submit(Problem(question="What is 1 + 1? [wf:chain]", answer="2"))  # beta: 401
            service.wait([ok, bad], timeout=120)
            deadline = time.monotonic() + 60
            while f"scored job {ok}" not in (tmp_path / "w1.log").read_text() and time.monotonic() < deadline:
                time.sleep(0.2)
    finally:
        server.stop()

    # The canary was in play: the workers sent it, and a provider rejected it.
    assert server.calls and all(c.headers.get("authorization") == f"Bearer {canary}" for c in server.calls)
    assert service.job(ok)["status"] == "done" and service.job(bad)["status"] == "failed"
    # What was captured is the traffic Flower reads: every pipeline task's message with its
    # argument reprs, the bodies decoded (they name the jobs), and the task events.
    text, bodies = "\n".join(commands), _bodies(commands)
    for name in (TaskName.PLAN, TaskName.RUN_STEP, TaskName.SCORE):  # submit sends the plan itself: no solve hop
        assert f'"task": "{name.value}"' in text and '"argsrepr"' in text, name
    assert any(ok in body for body in bodies) and any(bad in body for body in bodies)
    assert any('"task-succeeded"' in body for body in bodies), "task events were published"
    assert app.conf.task_ignore_result and "celery-task-meta" not in text, "no result backend stores results"

    leaks = [f"Redis command #{i}" for i, command in enumerate(commands) if canary in command]
    leaks += [f"message body #{i}" for i, body in enumerate(bodies) if canary in body]
    leaks += [str(log) for log in tmp_path.glob("*.log") if canary in log.read_text()]
    assert not leaks, f"the canary key leaked into: {leaks}"
