"""A job's trace in a real OTLP receiver that is not ours: Arize Phoenix (`phoenix serve`, from the
virtualenv `make phoenix-venv` builds), started by the test on free ports with a temporary working
directory. The system is a real deployment: a `conductor api` process and a worker process (and beat)
on Redis and PostgreSQL, the scripted model server behind the pool.

Every process of the deployment sends OTLP to Phoenix, once over HTTP (`/v1/traces`) and once over gRPC
(Phoenix's gRPC port), as `OTEL_EXPORTER_OTLP_PROTOCOL` says; the spans are read back from Phoenix's REST API and must form the tree `tests/integration/test_tracing.py` checks on our own
receiver: the caller's span (a `traceparent` on the request) -> the API's request span -> the job ->
its round -> the plan and three steps -> one model call each, with the scripted server's token counts.
This process only sends HTTP requests and installs no tracer provider of its own.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from conductor.store.models import Job, Step
from tests.conftest import default_script
from tests.support.api_deployment import Deployment, deploy
from tests.support.otlp_receiver import ReceivedSpan, assert_fanout_job, assert_no_orphans, children, one, subtree
from tests.support.phoenix import PHOENIX, PhoenixServer
from tests.support.scripted_llm import Reply, usage
from tests.support.waiting import wait_for
from tests.support.worker_kill import CHAIN_QUESTION, FAST_REAPER, kill_mid_call, slow_first_step

pytestmark = [pytest.mark.services, pytest.mark.phoenix]

#: Every process's spans go to one Phoenix project per protocol, named by a resource attribute (Phoenix's
#: convention), and each run's caller has a trace of its own: Phoenix keeps a trace id in one project.
PROJECT = "conductor-phoenix-{protocol}"
CALLER_TRACES = {"http/protobuf": "6cf92f3577b34da6a3ce929d0e0e4738", "grpc": "4bf92f3577b34da6a3ce929d0e0e4736"}
CALLER_SPAN = "02f067aa0ba902b9"
REQUEST = "POST /v1/jobs"


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoenixServer]:
    if not PHOENIX.exists():
        message = f"Phoenix venv missing ({PHOENIX}); run `make phoenix-venv` (scripts/setup_phoenix_venv.sh)"
        # `make test-phoenix` builds the venv first, so there a missing venv is a failure, not a skip.
        if os.environ.get("CONDUCTOR_TEST_REQUIRE_PHOENIX") == "1":
            pytest.fail(message)
        pytest.skip(message)
    server = PhoenixServer(tmp_path_factory.mktemp("phoenix")).start()
    try:
        yield server
    finally:
        server.stop()


class RecordingScript:
    """`default_script()`, keeping every answer it gave (the server answers from several threads)."""

    def __init__(self) -> None:
        self.answers: list[str] = []
        self._script = default_script()
        self._lock = threading.Lock()

    def __call__(self, model: str, messages: list[dict], body: dict) -> Reply:
        reply = self._script(model, messages, body)
        with self._lock:
            self.answers.append(reply.content)
        return reply


def _export_to(phoenix: PhoenixServer, project: str, monkeypatch: pytest.MonkeyPatch, protocol: str) -> None:
    """The deployment's processes take their environment from this one's: the standard variables only."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", phoenix.grpc_endpoint if protocol == "grpc" else phoenix.url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "conductor")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", f"openinference.project.name={project}")


def _submit(d: Deployment, key: str, question: str, traceparent: str | None) -> str:
    headers = {"Authorization": f"Bearer {key}", **({"traceparent": traceparent} if traceparent else {})}
    response = httpx.post(f"{d.base_url}/jobs", json={"problem": {"question": question}}, headers=headers, timeout=30)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _wait_done(d: Deployment, key: str, job_ids: list[str], timeout: float = 60.0) -> None:
    def done(job_id: str) -> bool:
        job = httpx.get(f"{d.base_url}/jobs/{job_id}", headers={"Authorization": f"Bearer {key}"}).json()
        assert job["status"] not in ("failed", "cancelled"), job
        return bool(job["status"] == "done")

    for job_id in job_ids:
        wait_for(f"job {job_id} to be done", lambda job_id=job_id: done(job_id), timeout, every=0.2)


def _jobs_arrived(phoenix: PhoenixServer, project: str, traces: list[str]) -> bool:
    """Each trace holds its whole job in Phoenix: the job span and the 9 spans below it (Phoenix inserts
    what it receives in batches, and the job span is written when the job ends)."""
    spans = phoenix.spans(project)
    jobs = [s for s in spans if s.name == "conductor.job" and s.trace_id in traces]
    return len(jobs) == len(traces) and all(len(subtree(spans, j)) >= 10 for j in jobs)


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_a_three_step_jobs_trace_arrives_in_phoenix_with_its_tree_parents_and_token_counts(
    protocol: str, tmp_path: Path, pg_url: str, redis_db: str, phoenix: PhoenixServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, caller_trace = PROJECT.format(protocol=protocol.split("/")[0]), CALLER_TRACES[protocol]
    _export_to(phoenix, project, monkeypatch, protocol)
    script = RecordingScript()
    # One worker process (and beat) beside the API's: the trace still crosses processes, and two workers
    # would add half a minute of start and stop on two busy cores (the worker-to-worker case is test_tracing's).
    with deploy(tmp_path, pg_url, redis_db, script, worker_names=("w1",)) as d:
        key = d.key("acme")
        # One job under a caller's span, one whose request carries no trace context.
        child = _submit(d, key, "[wf:fanout] part A and part B, then combine", f"00-{caller_trace}-{CALLER_SPAN}-01")
        rooted = _submit(d, key, "[wf:fanout] part C and part D, then join them", None)
        _wait_done(d, key, [child, rooted])
        with d.runtime.sessions() as s:
            traces = {j: (s.get_one(Job, j).traceparent or "-").split("-")[1] for j in (child, rooted)}  # "": none
            steps = {j: {st.step_index: st for st in s.scalars(select(Step).where(Step.job_id == j))} for j in traces}
        answers = list(script.answers)
        assert traces[child] == caller_trace and traces[rooted] != caller_trace
        wait_for("the jobs' spans in Phoenix", lambda: _jobs_arrived(phoenix, project, list(traces.values())), 30)
        time.sleep(1.5)  # anything late (a duplicate) would show below
    spans = phoenix.spans(project)

    calls: list[ReceivedSpan] = []
    for job_id, caller in ((child, CALLER_SPAN), (rooted, None)):
        in_trace = [s for s in spans if s.trace_id == traces[job_id]]
        assert_no_orphans(in_trace, caller)  # every parent arrived, no span twice
        request = one(in_trace, REQUEST)  # FastAPI's server span: the caller's child, or the trace's root
        assert request.parent_id == caller and request.attributes["http.response.status_code"] == 201
        job = one(in_trace, "conductor.job")
        assert job.attributes["conductor.job.id"] == job_id
        by_id = {s.span_id: s for s in in_trace}
        at = job
        while at.parent_id in by_id:
            at = by_id[at.parent_id]
        assert at is request  # the job was submitted while the API handled the request
        # Every span of the trace descends from the request's: FastAPI's own, and the job's ten (the job, its
        # round, the plan with its Conductor call, three steps with one model call each), nothing more.
        assert len(subtree(in_trace, request)) == len(in_trace), [s.name for s in in_trace]
        assert len(subtree(in_trace, job)) == 10, [s.name for s in subtree(in_trace, job)]
        job_calls = assert_fanout_job(in_trace, job, steps[job_id])
        assert job_calls[0].name == "chat openai/scripted-conductor"
        assert {c.attributes["gen_ai.provider.name"] for c in job_calls} == {"openai"}
        calls += job_calls

    # Token counts as the scripted server reported them: one model call span per answer it gave.
    assert len(answers) == 8
    reported = Counter((usage(a)["prompt_tokens"], usage(a)["completion_tokens"]) for a in answers)
    traced = Counter(
        (c.attributes["gen_ai.usage.input_tokens"], c.attributes["gen_ai.usage.output_tokens"]) for c in calls
    )
    assert traced == reported
    assert max(out for _, out in traced) > 1  # real counts, not a placeholder
    # ...and Phoenix read them as token counts (its `llm.token_count.*`, which its UI sums), not opaque attributes.
    assert all(
        (c.attributes["llm.token_count.prompt"], c.attributes["llm.token_count.completion"])
        == (c.attributes["gen_ai.usage.input_tokens"], c.attributes["gen_ai.usage.output_tokens"])
        for c in calls
    )


def test_a_step_the_reaper_re_ran_after_its_worker_died_stays_in_the_jobs_one_trace_in_phoenix(
    tmp_path: Path, pg_url: str, redis_db: str, phoenix: PhoenixServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = PROJECT.format(protocol="reaper")
    _export_to(phoenix, project, monkeypatch, "http/protobuf")
    with deploy(tmp_path, pg_url, redis_db, slow_first_step, worker_names=("w1", "w2"), **FAST_REAPER) as d:
        key = d.key("acme")
        job_id = _submit(d, key, CHAIN_QUESTION, None)
        kill_mid_call(d.runtime.sessions, job_id, d.workers)
        _wait_done(d, key, [job_id], timeout=120)
        with d.runtime.sessions() as s:
            trace_id = (s.get_one(Job, job_id).traceparent or "-").split("-")[1]
            first = s.scalars(select(Step).where(Step.job_id == job_id, Step.step_index == 0)).one()
            assert first.attempts == 2  # the reaper re-sent it and the other worker ran it

        def arrived() -> bool:
            spans = [s for s in phoenix.spans(project) if s.trace_id == trace_id]
            return (
                any(s.name == "conductor.job" for s in spans)
                and sum(s.name == "conductor.run_step" for s in spans) >= 2
            )

        wait_for("the job's spans in Phoenix", arrived, 30)
        time.sleep(1.5)  # anything late (a duplicate) would show below
    spans = phoenix.spans(project)

    # Every span naming this job is in its one trace, and every parent arrived: the API's request span is its root.
    assert {s.trace_id for s in spans if s.attributes.get("conductor.job.id") == job_id} == {trace_id}
    in_trace = [s for s in spans if s.trace_id == trace_id]
    assert_no_orphans(in_trace, None)
    job = one(in_trace, "conductor.job")
    (round_,) = children(in_trace, job)
    # The re-run hangs under the same round as the first step's other attempt would have, beside step 1.
    step_spans = [s for s in in_trace if s.name == "conductor.run_step"]
    assert all(s.parent_id == round_.span_id for s in step_spans)
    assert sorted(s.attributes["conductor.step.index"] for s in step_spans) == [0, 1]
