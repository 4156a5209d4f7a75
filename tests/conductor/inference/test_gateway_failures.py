"""How the gateway fails: Retry-After honoured, retries then fallback, timeouts, dead endpoints, end to end."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from conductor.config.pool import Pool
from conductor.domain.errors import ModelCallError, ModelServerUnreachable, RateLimited
from conductor.domain.problem import Problem
from conductor.inference.gateway import Gateway
from tests.conftest import default_script
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import Reply, ScriptedLLMServer
from tests.support.system import embedded_system

HI = [{"role": "user", "content": "hi"}]


def _gateway(pool: Pool, tmp_path) -> Gateway:
    # Tiny backoff: any wait longer than a few ms must come from the server's Retry-After
    # (which the gateway caps at 4 x backoff_max_s, so that keeps its default).
    return Gateway(pool, model_home=tmp_path, backoff_base_s=0.01)


def _server(script) -> ScriptedLLMServer:
    return ScriptedLLMServer(script).start()


def test_retry_after_is_honoured_until_the_call_succeeds(tmp_path):
    seen = []
    lock = threading.Lock()

    def script(model, messages, body):
        with lock:
            seen.append(time.monotonic())
            n = len(seen)
        if n <= 2:
            return Reply(status=429, headers={"Retry-After": "1"}, error="slow down")
        return Reply("finally")

    server = _server(script)
    try:
        gateway = _gateway(scripted_pool(server.base_url, retries=3), tmp_path)
        started = time.monotonic()
        c = gateway.call_worker("alpha", HI)
        elapsed = time.monotonic() - started
    finally:
        server.stop()

    assert c.text == "finally" and c.attempts == 3 and len(seen) == 3
    assert elapsed >= 1.9, "two Retry-After: 1 answers mean about two seconds of waiting"
    assert seen[1] - seen[0] >= 0.95 and seen[2] - seen[1] >= 0.95
    assert len(c.errors) == 2 and all("RateLimitError" in e for e in c.errors)


def test_a_long_retry_after_hands_the_work_back_to_the_queue_instead_of_sleeping(tmp_path):
    from conductor.domain.errors import RateLimited

    server = _server(lambda model, messages, body: Reply(status=429, headers={"Retry-After": "45"}, error="busy"))
    try:
        gateway = Gateway(
            scripted_pool(server.base_url, retries=3, fallback="beta"), model_home=tmp_path, max_inline_wait_s=5
        )
        started = time.monotonic()
        with pytest.raises(RateLimited) as caught:
            gateway.call_worker("alpha", HI)
    finally:
        server.stop()
    assert caught.value.retry_after == 45
    assert time.monotonic() - started < 5, "the worker slot must not sleep through the Retry-After"
    assert len(server.calls) == 1, "no retry and no fallback: the step is re-queued with that countdown"


def test_server_errors_exhaust_the_retries_then_the_fallback_answers(tmp_path):
    def script(model, messages, body):
        if model.endswith("alpha"):
            return Reply(status=500, error="alpha is down")
        return Reply("beta here")

    server = _server(script)
    try:
        gateway = _gateway(scripted_pool(server.base_url, retries=2, fallback="beta"), tmp_path)
        c = gateway.call_worker("alpha", HI)
    finally:
        server.stop()

    assert c.served_by == "beta" and c.worker == "alpha" and c.text == "beta here"
    assert len(server.calls_for("scripted-worker-alpha")) == 3, "1 call + 2 retries before falling back"
    assert len(server.calls_for("scripted-worker-beta")) == 1
    assert len(c.errors) == 1 and c.errors[0].startswith("alpha: failed after 3 attempts")
    assert "alpha is down" in c.errors[0]


def test_a_timeout_is_retried_then_fails_naming_the_timeout(tmp_path):
    server = _server(lambda model, messages, body: Reply("too late", delay_s=3))
    try:
        gateway = _gateway(scripted_pool(server.base_url, retries=1, timeout_s=0.5), tmp_path)
        started = time.monotonic()
        with pytest.raises(ModelCallError) as info:
            gateway.call_worker("alpha", HI)
        elapsed = time.monotonic() - started
    finally:
        server.stop()

    assert len(server.calls_for("scripted-worker-alpha")) == 2
    assert "failed after 2 attempts" in str(info.value) and "Timeout" in str(info.value)
    assert not isinstance(info.value, ModelServerUnreachable), "it was reached: it answered too slowly"
    assert elapsed < 2.5, "each attempt gives up at its 0.5 s timeout, not when the server answers"


def _solve_embedded(tmp_path, pool: Pool, question: str, **settings) -> dict:
    with embedded_system(tmp_path, pool, recursion=False, **settings) as sys:
        sys.runtime.gateway.backoff_base_s = 0.01
        job_id, _ = sys.service.submit(Problem(question=question))
        sys.service.wait([job_id], timeout=60)
        return sys.service.job(job_id)


def _closed_port() -> int:
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_dead_endpoint_fails_fast_naming_its_address_and_what_to_check(tmp_path):
    dead = f"http://127.0.0.1:{_closed_port()}/v1"
    gateway = _gateway(scripted_pool(dead, retries=1, timeout_s=5), tmp_path)

    started = time.monotonic()
    with pytest.raises(ModelServerUnreachable) as info:
        gateway.call_worker("beta", HI)

    # litellm files a refused connection under InternalServerError ("Connection error."); the
    # reason names the address from the pool file and the refusal underneath.
    assert str(info.value).startswith(f"beta: cannot reach the model server at {dead} (")
    assert "Connection refused, 2 attempts): is it running, and is api_base in the pool file right?" in str(info.value)
    assert info.value.url == dead
    assert time.monotonic() - started < 5, "a refused connection fails fast"


def test_end_to_end_a_job_whose_model_server_is_down_fails_with_its_address_after_retries_and_fallback(tmp_path):
    server = _server(default_script())
    dead = f"http://127.0.0.1:{_closed_port()}/v1"
    try:
        pool = Pool.model_validate(
            {
                "conductor": {"model": "openai/scripted-conductor", "api_base": server.base_url, "retries": 0},
                "workers": [
                    {"name": "alpha", "model": "openai/a", "description": "a", "api_base": dead, "retries": 1,
                     "fallback": "beta"},
                    {"name": "beta", "model": "openai/b", "description": "b", "api_base": dead, "retries": 1},
                ],
            }
        )  # fmt: skip
        job = _solve_embedded(tmp_path, pool, "[wf:single] x")
    finally:
        server.stop()

    assert job["status"] == "failed"
    step = job["chains"][0]["rounds"][0]["steps"][0]
    assert step["status"] == "failed"
    for worker in ("alpha", "beta"):  # both were tried, each with its retry
        assert f"{worker}: cannot reach the model server at {dead} (" in step["error"]
        assert "2 attempts" in step["error"]
    assert ModelServerUnreachable.reason_in(job["error"]) is not None, job["error"]


def test_end_to_end_a_step_whose_worker_always_fails_ends_failed_with_the_reason(tmp_path):
    def script(model, messages, body):
        if model.endswith("conductor"):
            return default_script()(model, messages, body)
        return Reply(status=500, error="worker melted")

    server = _server(script)
    try:
        pool = scripted_pool(server.base_url, retries=1)
        job = _solve_embedded(tmp_path, pool, "[wf:chain] x", provider_requeues=2, provider_requeue_backoff_s=0.05)
    finally:
        server.stop()

    steps = job["chains"][0]["rounds"][0]["steps"]
    assert [s["status"] for s in steps] == ["failed", "skipped"]
    assert "failed after 2 attempts" in steps[0]["error"] and "worker melted" in steps[0]["error"]
    assert job["status"] == "failed" and "worker melted" in job["error"]
    # 2 attempts per delivery, the first delivery and 2 hand-backs to the queue, then it fails
    assert len(server.calls_for("scripted-worker-alpha")) == 6 and not server.calls_for("scripted-worker-beta")


def test_end_to_end_a_provider_failing_for_a_while_delays_the_step_instead_of_failing_it(tmp_path):
    """A 5xx window longer than the inline retries: the step goes back to the queue and then succeeds."""
    calls = []

    def script(model, messages, body):
        if model.endswith("conductor"):
            return default_script()(model, messages, body)
        calls.append(model)
        return Reply(status=503, error="overloaded") if len(calls) <= 3 else Reply("fine")

    server = _server(script)
    try:
        pool = scripted_pool(server.base_url, retries=1)
        job = _solve_embedded(tmp_path, pool, "[wf:single] x", provider_requeues=2, provider_requeue_backoff_s=0.05)
    finally:
        server.stop()

    assert job["status"] == "done", job
    step = job["chains"][0]["rounds"][0]["steps"][0]
    assert step["status"] == "done" and step["output"] == "fine"
    assert len(calls) == 4  # delivery 1: two 503s, handed back; delivery 2: a 503, then the answer


class _AlwaysLimited:
    def slot(self, spec, *, estimated_tokens):
        raise RateLimited(f"{spec.model}: busy", retry_after=1.5)


def test_a_cluster_limit_is_not_a_failure_no_fallback_no_retry(tmp_path):
    server = _server(lambda model, messages, body: Reply("never"))
    try:
        pool = scripted_pool(server.base_url, retries=2, fallback="beta")
        gateway = Gateway(pool, model_home=tmp_path, limiter=_AlwaysLimited())
        with pytest.raises(RateLimited) as info:
            gateway.call_worker("alpha", HI)
    finally:
        server.stop()

    assert info.value.retry_after == 1.5
    assert server.calls == [], "neither retried nor handed to the fallback: the step is re-queued instead"


def test_models_check_reports_each_model_and_fails_if_any_did(tmp_path):
    import yaml
    from typer.testing import CliRunner

    from conductor.cli.main import app

    def script(model, messages, body):
        if model.endswith("beta"):
            return Reply(status=503, error="beta is overloaded")
        return Reply("ok")

    server = _server(script)
    try:
        pool_file = tmp_path / "pool.yaml"
        pool_file.write_text(yaml.safe_dump(scripted_pool(server.base_url, retries=3).model_dump(exclude_none=True)))
        result = CliRunner().invoke(
            app, ["models", "check", "--pool", str(pool_file), "--timeout", "5"], env={"CONDUCTOR_HOME": str(tmp_path)}
        )
    finally:
        server.stop()

    assert result.exit_code == 1, result.output
    rows = {line.split("│")[2].strip(): line for line in result.output.splitlines() if line.count("│") > 3}
    assert "ok" in rows["alpha"] and "ok" in rows["conductor"]
    assert "FAILED" in rows["beta"] and "beta is overloaded" in " ".join(result.output.split())
    assert len(server.calls_for("scripted-worker-beta")) == 1, "a check does not retry"
    assert "1 of 3 model(s) failed" in result.output


def test_models_check_names_an_unreachable_server_once_and_exits_5(tmp_path):
    import yaml
    from typer.testing import CliRunner

    from conductor.cli.main import app

    dead = f"http://127.0.0.1:{_closed_port()}/v1"
    pool_file = tmp_path / "pool.yaml"
    pool_file.write_text(yaml.safe_dump(scripted_pool(dead, retries=3).model_dump(exclude_none=True)))
    result = CliRunner().invoke(
        app, ["models", "check", "--pool", str(pool_file), "--timeout", "5"], env={"CONDUCTOR_HOME": str(tmp_path)}
    )

    assert result.exit_code == 5, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, "three models on one server: one line"
    assert errors[0].startswith(f"error: cannot reach the model server at {dead} (")
    assert "1 attempt)" in errors[0], "a check does not retry"
    assert "3 of 3 model(s) failed" in result.output and "Traceback" not in result.output
