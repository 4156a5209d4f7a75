"""OpenTelemetry traces of real jobs: Redis broker, PostgreSQL store, worker processes, and a real
OTLP/HTTP receiver the exporters of every process send to.

One trace per job, whatever process or hop made its spans: the caller's span -> the job -> its
round -> the plan and the steps -> one model call each, with the GenAI conventions' token counts;
a step the reaper re-ran after its worker died still lands in that one trace, with no orphan span.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from sqlalchemy import select

from conductor import telemetry
from conductor.domain.problem import Problem
from conductor.store.models import Job, Step
from tests.api.conftest import harness  # noqa: F401  (the API fixture)
from tests.conftest import default_script
from tests.integration.test_cluster import _client
from tests.support.api_deployment import batch_file
from tests.support.cluster import cluster_env, workers, write_pool
from tests.support.otlp_receiver import OtlpReceiver, assert_fanout_job, assert_no_orphans, children, one
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import ScriptedLLMServer
from tests.support.worker_kill import CHAIN_QUESTION, FAST_REAPER, kill_mid_call, slow_first_step

pytestmark = pytest.mark.services

OTEL_ENV = {"OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_SERVICE_NAME": "conductor-test"}


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    """Tracing on in this process (it submits the jobs) and in every worker it starts."""
    rx = OtlpReceiver().start()
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": rx.endpoint, **OTEL_ENV}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        assert telemetry.setup()
        yield rx
    finally:
        telemetry.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        rx.stop()


def test_a_three_step_job_makes_one_trace_under_the_callers_span(tmp_path, pg_url, redis_db, receiver):
    server = ScriptedLLMServer(default_script()).start()
    pool = scripted_pool(server.base_url)
    env = cluster_env(tmp_path, redis_db, pg_url, write_pool(pool, tmp_path / "pool.yaml"), recursion="false")
    env["OTEL_SERVICE_NAME"] = "conductor-worker"
    service = _client(tmp_path, redis_db, pg_url, pool)
    try:
        with workers(env, tmp_path, ["w1", "w2"]):
            # The caller's own span, as an API request carrying a `traceparent` would be.
            with trace.get_tracer("test").start_as_current_span("caller") as caller:
                job_id, _ = service.submit(Problem(question="[wf:fanout] part A and part B, then combine"))
            telemetry.force_flush()
            service.wait([job_id], timeout=60)
            assert service.job(job_id)["status"] == "done"
            trace_id = f"{caller.get_span_context().trace_id:032x}"
            caller_id = f"{caller.get_span_context().span_id:016x}"
            # caller, job, round, plan + its Conductor call, three steps + one model call each
            receiver.wait_for(lambda rx: len(rx.trace(trace_id)) >= 1 + 1 + 1 + 2 + 3 + 3)
            time.sleep(1.0)  # anything late (a duplicate) would show below
            with service.sessions() as s:
                steps = {st.step_index: st for st in s.scalars(select(Step).where(Step.job_id == job_id))}
                tenant = s.get_one(Job, job_id).tenant_id
    finally:
        server.stop()

    spans = receiver.trace(trace_id)
    assert len(spans) == 11, [s.name for s in spans]
    assert_no_orphans(spans, None)
    job = one(spans, "conductor.job")
    assert job.parent_id == caller_id and job.attributes["conductor.job.id"] == job_id
    assert "conductor.tenant.id" not in job.attributes and tenant is None  # no tenant, no attribute
    conductor_call, *_ = assert_fanout_job(spans, job, steps)
    assert conductor_call.attributes["gen_ai.request.model"] == pool.conductor.model
    assert conductor_call.attributes["gen_ai.provider.name"] == pool.conductor.provider

    # Content is off unless asked: no prompt, subtask or answer in any attribute.
    assert not [k for s in spans for k in s.attributes if k.startswith("gen_ai.") and k.endswith(".messages")]
    assert not [v for s in spans for v in s.attributes.values() if isinstance(v, str) and "part A" in v]
    # Made in two kinds of process: the submitting one (the caller) and the workers (the rest).
    assert {s.service for s in spans} == {"conductor-test", "conductor-worker"}


def test_a_step_the_reaper_re_ran_after_its_worker_died_stays_in_the_jobs_one_trace(
    tmp_path, pg_url, redis_db, receiver
):
    server = ScriptedLLMServer(slow_first_step).start()
    pool = scripted_pool(server.base_url)
    env = cluster_env(
        tmp_path,
        redis_db,
        pg_url,
        write_pool(pool, tmp_path / "pool.yaml"),
        recursion="false",
        **FAST_REAPER,
    )
    service = _client(tmp_path, redis_db, pg_url, pool)
    try:
        with workers(env, tmp_path, ["w1", "w2"], beat=True) as procs:
            job_id, _ = service.submit(Problem(question=CHAIN_QUESTION))
            kill_mid_call(service.sessions, job_id, procs)
            service.wait([job_id], timeout=120)
            view = service.job(job_id)
            assert view["status"] == "done" and view["chains"][0]["rounds"][0]["steps"][0]["attempts"] == 2
            with service.sessions() as s:
                trace_id = s.get_one(Job, job_id).traceparent.split("-")[1]
            receiver.wait_for(lambda rx: any(s.name == "conductor.job" for s in rx.trace(trace_id)))
            receiver.wait_for(lambda rx: sum(s.name == "conductor.run_step" for s in rx.trace(trace_id)) >= 2)
    finally:
        server.stop()

    spans = receiver.trace(trace_id)
    # Every span naming this job is in its one trace, and every parent arrived.
    assert {s.trace_id for s in receiver.spans if s.attributes.get("conductor.job.id") == job_id} == {trace_id}
    assert_no_orphans(spans, None)
    job = one(spans, "conductor.job")
    assert job.parent_id is None  # submitted with no caller span: the job is the root
    (round_,) = children(spans, job)
    step_spans = [s for s in spans if s.name == "conductor.run_step"]
    # The re-run (and whatever the killed worker had no time to send: nothing) hangs under the round.
    assert all(s.parent_id == round_.span_id for s in step_spans)
    assert sorted(s.attributes["conductor.step.index"] for s in step_spans) == [0, 1]


def test_a_traceparent_on_an_api_request_makes_the_jobs_trace_a_child_of_the_callers(harness, receiver):  # noqa: F811
    """The HTTP API (embedded: SQLite, in-process worker); the caller's span is someone else's."""
    trace_id, caller_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    key = harness.key("acme")
    response = harness.client.post(
        "/v1/jobs",
        json={"problem": {"question": "[wf:chain] 2+2?"}},
        headers=harness.headers(key, traceparent=f"00-{trace_id}-{caller_id}-01"),
    )
    assert response.status_code == 201
    job_id = response.json()["id"]
    deadline = time.monotonic() + 60
    while harness.client.get(f"/v1/jobs/{job_id}", headers=harness.headers(key)).json()["status"] != "done":
        assert time.monotonic() < deadline, "the job did not finish"
        time.sleep(0.2)
    telemetry.force_flush()
    receiver.wait_for(lambda rx: any(s.name == "conductor.job" for s in rx.trace(trace_id)))

    spans = receiver.trace(trace_id)
    request = one(spans, "POST /v1/jobs")  # FastAPI's server span, continuing the caller's
    assert request.parent_id == caller_id and request.attributes["http.response.status_code"] == 201
    assert not [k for s in spans for k in s.attributes if "authorization" in k.lower()]
    job = one(spans, "conductor.job")
    assert _topmost(spans, job) is request  # the job was submitted while handling the request
    with harness.client.app.state.api.sessions() as s:
        tenant_id = s.get_one(Job, job_id).tenant_id
    assert job.attributes["conductor.tenant.id"] == tenant_id and job.attributes["conductor.job.id"] == job_id
    assert_no_orphans(spans, caller_id)
    assert sum(s.name == "conductor.run_step" for s in spans) == 2


def _topmost(spans: list, span: Any) -> Any:
    """The highest ancestor of `span` among `spans` (its parent beyond is the caller's, not received)."""
    by_id = {s.span_id: s for s in spans}
    while span.parent_id in by_id:
        span = by_id[span.parent_id]
    return span


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("/v1/chat/completions", {"model": "conductor", "messages": [{"role": "user", "content": "[wf:chain] 2+2?"}]}),
        ("/v1/responses", {"model": "conductor", "input": "[wf:chain] 2+2?"}),
    ],
)
def test_a_traceparent_on_a_chat_or_responses_request_makes_the_jobs_trace_a_child_of_the_callers(
    harness,  # noqa: F811
    receiver,
    route: str,
    body: dict,
):
    trace_id, caller_id = f"{secrets.randbits(128):032x}", "00f067aa0ba902b7"
    answered = harness.client.post(
        route, json=body, headers=harness.headers(harness.key("acme"), traceparent=f"00-{trace_id}-{caller_id}-01")
    )
    assert answered.status_code == 200, answered.text
    telemetry.force_flush()
    receiver.wait_for(lambda rx: any(s.name == "conductor.job" for s in rx.trace(trace_id)))

    spans = receiver.trace(trace_id)
    request = one(spans, f"POST {route}")
    assert request.parent_id == caller_id
    assert _topmost(spans, one(spans, "conductor.job")) is request
    assert_no_orphans(spans, caller_id)
    assert sum(s.name == "conductor.run_step" for s in spans) == 2


def test_a_traceparent_on_a_batch_creation_makes_each_lines_job_a_child_of_that_request(harness, receiver):  # noqa: F811
    """The lines are read later by a worker's task, not in the request: the batch row keeps the request's
    trace context, and every line's job is a child of the request's span in the caller's trace."""
    trace_id, caller_id = "5cf92f3577b34da6a3ce929d0e0e4737", "01f067aa0ba902b8"
    key = harness.key("acme", scopes=["files", "batches"])
    upload = harness.client.post(
        "/v1/files",
        files={"file": ("in.jsonl", batch_file(2, workflow="chain", prefix="traced"))},
        data={"purpose": "batch"},
        headers=harness.headers(key),
    )
    created = harness.client.post(
        "/v1/batches",
        json={"input_file_id": upload.json()["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"},
        headers=harness.headers(key, traceparent=f"00-{trace_id}-{caller_id}-01"),
    )
    assert created.status_code == 200, created.text
    deadline = time.monotonic() + 60
    while (batch := harness.client.get(f"/v1/batches/{created.json()['id']}", headers=harness.headers(key)).json())[
        "status"
    ] != "completed":
        assert time.monotonic() < deadline, batch
        time.sleep(0.2)
    telemetry.force_flush()
    receiver.wait_for(lambda rx: sum(s.name == "conductor.job" for s in rx.trace(trace_id)) == 2)

    spans = receiver.trace(trace_id)
    request = one(spans, "POST /v1/batches")
    assert request.parent_id == caller_id
    jobs = [s for s in spans if s.name == "conductor.job"]
    by_id = {s.span_id: s for s in spans}
    for job in jobs:  # each under the request's span (FastAPI's endpoint span, inside it, was current)
        at = job
        while at.parent_id in by_id and at is not request:
            at = by_id[at.parent_id]
        assert at is request, (job.attributes["conductor.job.id"], at.name)
    with harness.client.app.state.api.sessions() as s:
        line_jobs = set(s.scalars(select(Job.id).where(Job.batch_id == batch["id"])))
    assert {job.attributes["conductor.job.id"] for job in jobs} == line_jobs
    assert_no_orphans(spans, caller_id)
    assert sum(s.name == "conductor.run_step" for s in spans) == 4  # two steps per line, all in this trace
