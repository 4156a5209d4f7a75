"""The Responses API with the official `openai` client against a real `conductor api` process, real
worker processes, Redis and PostgreSQL (the scripted model server behind the pool)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from standardwebhooks import Webhook

from conductor.store.models import Checkpoint, Tenant
from tests.conftest import default_script
from tests.support.api_deployment import Deployment, fresh_deployment
from tests.support.scripted_llm import Reply
from tests.support.webhook_receiver import Receiver

pytestmark = pytest.mark.services


def _script() -> Any:
    """The default script; a call whose last message says [slow] (the Conductor's: workers see only their
    subtasks) takes 3 s; a pinned Conductor (its adapter served under its own name) plans the same way."""
    base = default_script(worker_delay=0.05)

    def script(model: str, messages: list[dict], body: dict) -> Reply:
        if model.startswith("conductor-"):  # a checkpoint's adapter, served under its own name
            model = "scripted-conductor"
        reply = base(model, messages, body)
        if "[slow]" in messages[-1]["content"]:
            reply.delay_s = 3.0
        return reply

    return script


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    # The webhook receiver listens on loopback, which webhooks may reach only when allowed.
    with fresh_deployment(tmp_path_factory.mktemp("responses"), _script(), webhook_allow="127.0.0.1") as d:
        yield d


def _jobs(d: Deployment, key: str) -> int:
    r = httpx.get(f"{d.base_url}/jobs?limit=100", headers={"Authorization": f"Bearer {key}"}, timeout=30)
    return len(r.json()["data"])


def _wait(client: openai.OpenAI, resp_id: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = client.responses.retrieve(resp_id)
        if r.status not in ("queued", "in_progress"):
            return r
        time.sleep(0.2)
    raise AssertionError(f"{resp_id} did not end")


def test_create_blocking_then_background_poll_with_usage_split(deployment: Deployment):
    client = deployment.client(deployment.key("acme"))
    r = client.responses.create(
        model="conductor",
        input="[wf:fanout] what is 6*7?",
        instructions="answer briefly",
        metadata={"ticket": "T-1"},
    )
    assert r.status == "completed" and r.id.startswith("resp_")
    assert r.output_text.startswith("alpha did <combine>")
    assert r.metadata == {"ticket": "T-1"} and r.instructions == "answer briefly"
    usage = r.usage.model_extra
    conductor, workers = usage["conductor"], usage["workers"]
    assert conductor["calls"] == 1 and workers["calls"] == 3, "one plan, three steps"
    assert conductor["input_tokens"] + workers["input_tokens"] == r.usage.input_tokens
    assert conductor["output_tokens"] + workers["output_tokens"] == r.usage.output_tokens
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens

    queued = client.responses.create(
        model="conductor",
        input=[{"role": "user", "content": [{"type": "input_text", "text": "[wf:chain] 2+2?"}]}],
        background=True,
    )
    assert queued.status in ("queued", "in_progress") and queued.background is True and not queued.output
    done = _wait(client, queued.id)
    assert done.status == "completed" and done.output_text.startswith("beta did <check>")
    job = httpx.get(
        f"{deployment.base_url}/jobs/{done.model_extra['conductor']['job_id']}",
        headers={"Authorization": f"Bearer {client.api_key}"},
    ).json()
    assert job["answer"] == done.output_text


def test_stream_a_drop_and_resume_give_the_same_numbered_events(deployment: Deployment):
    client = deployment.client(deployment.key("acme"))
    stream = client.responses.create(model="conductor", input="[wf:fanout] stream me", stream=True)
    events = [e for e in stream]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text and text == events[-1].response.output_text
    resp_id = events[0].response.id

    resumed = list(client.responses.retrieve(resp_id, stream=True, starting_after=2))
    assert [e.sequence_number for e in resumed] == list(range(3, len(events)))
    assert [e.model_dump() for e in resumed] == [e.model_dump() for e in events[3:]]

    # A stream dropped while the job runs: reading on from the last event seen loses nothing.
    live = client.responses.create(model="conductor", input="[wf:single] [slow] answer it", stream=True)
    first = next(iter(live))
    live.close()
    rest = list(client.responses.retrieve(first.response.id, stream=True, starting_after=first.sequence_number))
    assert rest[0].sequence_number == first.sequence_number + 1 and rest[-1].type == "response.completed"


def test_cancel_a_background_response(deployment: Deployment):
    client = deployment.client(deployment.key("acme"))
    r = client.responses.create(model="conductor", input="[wf:chain] [slow] take your time", background=True)
    cancelled = client.responses.cancel(r.id)
    assert cancelled.status == "cancelled"
    time.sleep(1)
    assert client.responses.retrieve(r.id).status == "cancelled"
    events = list(client.responses.retrieve(r.id, stream=True))
    assert events[-1].type == "response.failed" and events[-1].response.status == "cancelled"

    done = client.responses.create(model="conductor", input="[wf:single] quick")
    with pytest.raises(openai.ConflictError, match="already completed"):
        client.responses.cancel(done.id)


def test_bad_input_gets_a_clear_4xx_and_leaves_nothing_behind(deployment: Deployment):
    key = deployment.key("acme")
    client = deployment.client(key)
    mine = client.responses.create(model="conductor", input="[wf:single] mine")
    before = _jobs(deployment, key)

    with pytest.raises(openai.NotFoundError, match="no response resp_nope"):
        client.responses.retrieve("resp_nope")
    other = deployment.client(deployment.key("globex"))
    with pytest.raises(openai.NotFoundError, match=f"no response {mine.id}"):
        other.responses.retrieve(mine.id)
    with pytest.raises(openai.NotFoundError):
        other.responses.cancel(mine.id)
    for bad, says in [
        ("   ", "input is empty"),
        ([{"role": "robot", "content": "hi"}], "robot"),
        ([{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}], "only text parts"),
        ([{"role": "assistant", "content": "no question"}], "no user message"),
        (42, "valid string"),
    ]:
        with pytest.raises(openai.BadRequestError, match=says) as refused:
            client.responses.create(model="conductor", input=bad)  # type: ignore[arg-type]
        assert isinstance(refused.value.body, dict) and refused.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.responses.create(model="gpt-nope", input="hi")
    with pytest.raises(openai.NotFoundError, match="no checkpoint"):
        client.responses.create(model="conductor@missing", input="hi")
    events = list(client.responses.retrieve(mine.id, stream=True))
    with pytest.raises(openai.BadRequestError, match="past the end"):
        list(client.responses.retrieve(mine.id, stream=True, starting_after=events[-1].sequence_number))
    assert _jobs(deployment, key) == before, "no refused request wrote a job"


def test_a_model_name_pins_a_checkpoint(deployment: Deployment, tmp_path: Path):
    with deployment.runtime.sessions.begin() as s:
        s.add(Checkpoint(id="grpo-pinned", base_model="scripted", path=str(tmp_path), status="candidate"))
    client = deployment.client(deployment.key("acme"))
    seen = len(deployment.server.calls)
    r = client.responses.create(model="conductor@grpo-pinned", input="[wf:single] pinned")
    assert r.status == "completed" and r.model == "conductor@grpo-pinned"
    planned = [c.model for c in deployment.server.calls[seen:] if "conductor" in c.model]
    assert planned == ["conductor-grpo-pinned"], "the plan came from the pinned checkpoint, not the pool's Conductor"


def test_completed_and_failed_arrive_as_signed_webhooks(deployment: Deployment):
    receiver = Receiver(fail=0)
    key = deployment.key("hooked", webhook_url=receiver.url)
    with deployment.runtime.sessions() as s:
        secret = s.query(Tenant).filter_by(name="hooked").one().webhook_secret
    client = deployment.client(key)
    ok = client.responses.create(model="conductor", input="[wf:single] hook me")
    script = deployment.server.script
    deployment.server.script = lambda m, msgs, b: Reply(status=400, error="bad request")  # every call fails
    try:
        bad = client.responses.create(model="conductor", input="[wf:single] fail me")
    finally:
        deployment.server.script = script
    assert bad.status == "failed" and bad.error is not None
    deadline = time.monotonic() + 30
    while len(receiver.requests) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    events = {}
    for headers, body in receiver.requests:
        Webhook(secret).verify(body, headers)
        payload = json.loads(body)
        events[payload["type"]] = payload["data"]
    assert events["response.completed"]["id"] == ok.id and events["response.completed"]["output"]
    assert events["response.failed"]["id"] == bad.id and events["response.failed"]["status"] == "failed"
