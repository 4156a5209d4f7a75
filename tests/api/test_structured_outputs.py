"""Structured outputs and tool calls through the one-model API, as the official `openai` client uses them,
against both deployments: the embedded default (SQLite, in-process worker) and production (a `conductor api`
process, Celery worker processes, Redis and PostgreSQL). The pool is scripted, except in the last tests,
where SmolLM2-135M writes the answers. The scripted Conductor hands the whole conversation to one worker;
the worker answers from the request it receives (the format the gateway asked for in its own terms, and
what the conversation holds)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import openai
import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel, Field

from api.app import create_app
from conductor.config.pool import Pool
from conductor.config.settings import Settings
from tests.api.conftest import ApiHarness
from tests.conftest import MODEL_HOME
from tests.support.api_deployment import Deployment, deploy, fresh_deployment
from tests.support.cluster import write_pool
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import Reply, ScriptedLLMServer
from tests.support.workflows import block

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["C", "F"]}},
            "required": ["city", "unit"],
        },
    },
}


class City(BaseModel):
    name: str
    population: int


def worker_reply(messages: list[dict], body: dict[str, Any]) -> Reply:
    """A worker that honours the format it is asked for, unless the question tells it to misbehave."""
    asked = messages[-1]["content"]
    question = messages[0]["content"]
    if "[bad-json]" in question and "was rejected" not in asked:
        return Reply("Paris has about two million people.")  # not JSON: the corrective retry follows
    if "[never-json]" in question:
        return Reply("I will not write JSON.")
    if "result of call" in asked:
        return Reply("It is 21 degrees C in Paris.")
    if body.get("tools"):
        return Reply(tool_calls=[("get_weather", '{"city": "Paris", "unit": "C"}')])
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return Reply(json.dumps({"name": "Paris", "population": 2_100_000}))
    if fmt.get("type") == "json_object":
        return Reply('{"answer": 42}')
    return Reply("plain words")


def script(model: str, messages: list[dict], body: dict[str, Any]) -> Reply:
    if model.endswith("scripted-conductor"):
        return Reply(block("[0]", '["{question}"]', "[[]]"))
    return worker_reply(messages, body)


@pytest.fixture
def embedded_server() -> Iterator[ScriptedLLMServer]:
    s = ScriptedLLMServer(script).start()
    yield s
    s.stop()


@pytest.fixture
def h(tmp_path: Path, embedded_server: ScriptedLLMServer) -> Iterator[ApiHarness]:
    pool_file = write_pool(scripted_pool(embedded_server.base_url), tmp_path / "pool.yaml")
    settings = Settings(home=tmp_path, broker_url="memory://", pool_file=pool_file, recursion=False)
    with TestClient(create_app(settings)) as client:
        yield ApiHarness(client, embedded_server, tmp_path)


@pytest.fixture(scope="module")
def production(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """One production deployment for the module's checks (each test under a tenant of its own). The
    call cache is off: the checks count the worker calls each request makes."""
    with fresh_deployment(tmp_path_factory.mktemp("production"), script, call_cache="off") as d:
        yield d


@pytest.fixture(params=["embedded", pytest.param("production", marks=pytest.mark.services)])
def deployed(request: pytest.FixtureRequest) -> tuple[openai.OpenAI, ScriptedLLMServer]:
    """The official client on one of the two deployments, and the scripted server behind its pool."""
    if request.param == "embedded":
        h: ApiHarness = request.getfixturevalue("h")
        key = h.key("acme")
        return openai.OpenAI(
            base_url="http://testserver/v1", api_key=key, http_client=h.client, max_retries=0
        ), h.server
    d: Deployment = request.getfixturevalue("production")
    d.server.forget_calls()
    return d.client(d.key(f"t-{uuid.uuid4().hex[:8]}")), d.server


@pytest.fixture
def client(deployed: tuple[openai.OpenAI, ScriptedLLMServer]) -> openai.OpenAI:
    return deployed[0]


@pytest.fixture
def server(deployed: tuple[openai.OpenAI, ScriptedLLMServer]) -> ScriptedLLMServer:
    return deployed[1]


def worker_calls(server: ScriptedLLMServer) -> list[Any]:
    return server.calls_for("scripted-worker")


def test_parse_with_a_pydantic_model_returns_the_parsed_object(client: openai.OpenAI, server: ScriptedLLMServer):
    done = client.chat.completions.parse(
        model="conductor",
        messages=[{"role": "user", "content": "Which is the capital of France?"}],
        response_format=City,
    )
    assert done.choices[0].message.parsed == City(name="Paris", population=2_100_000)
    (call,) = worker_calls(server)
    asked = call.body["response_format"]
    assert asked["type"] == "json_schema" and asked["json_schema"]["schema"]["required"] == ["name", "population"]
    assert "conforms to this JSON Schema" in call.messages[-1]["content"], "the worker is told the schema too"


def test_a_json_object_request_answers_a_json_object(client: openai.OpenAI):
    done = client.chat.completions.create(
        model="conductor",
        messages=[{"role": "user", "content": "Give me the answer."}],
        response_format={"type": "json_object"},
        temperature=0.2,
        seed=7,
        user="u-1",
        metadata={"k": "v"},
    )
    assert json.loads(done.choices[0].message.content or "") == {"answer": 42}


def test_a_streamed_json_schema_answer_concatenates_to_conforming_json(client: openai.OpenAI):
    schema = City.model_json_schema()
    stream = client.chat.completions.create(
        model="conductor",
        messages=[{"role": "user", "content": "Which is the capital of France?"}],
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema, "strict": True}},
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert City.model_validate_json(text).name == "Paris"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"


def test_the_answer_ends_before_the_first_stop_sequence_streamed_or_not(client: openai.OpenAI):
    # The workflow wrote "plain words"; the client asked it to stop at " w" or "ds" (the earlier wins).
    ask = {"model": "conductor", "messages": [{"role": "user", "content": "Say something."}]}
    done = client.chat.completions.create(**ask, stop=["ds", " w"])
    assert done.choices[0].message.content == "plain" and done.choices[0].finish_reason == "stop"
    stream = client.chat.completions.create(**ask, stop="ords", stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "plain w"
    # A stop sequence the answer does not hold leaves it whole; the job's own record is never cut.
    whole = client.chat.completions.create(**ask, stop="zzz")
    assert whole.choices[0].message.content == "plain words"
    job = client.get(f"/jobs/{(done.model_extra or {})['conductor']['job_id']}", cast_to=object)
    assert job["answer"] == "plain words"


def test_a_non_conforming_answer_gets_one_corrective_retry(client: openai.OpenAI, server: ScriptedLLMServer):
    done = client.chat.completions.parse(
        model="conductor", messages=[{"role": "user", "content": "[bad-json] Capital of France?"}], response_format=City
    )
    assert done.choices[0].message.parsed is not None
    _, second = worker_calls(server)
    assert "That answer was rejected: the answer is not JSON" in second.messages[-1]["content"]
    assert second.messages[-2] == {"role": "assistant", "content": "Paris has about two million people."}


def test_an_answer_that_never_conforms_is_a_502_not_text(client: openai.OpenAI, server: ScriptedLLMServer):
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.parse(
            model="conductor", messages=[{"role": "user", "content": "[never-json] Capital?"}], response_format=City
        )
    assert caught.value.status_code == 502
    body = caught.value.body
    assert isinstance(body, dict) and "not JSON" in body["message"] and "corrective retry" in body["message"]
    assert len(worker_calls(server)) == 2


def test_a_tool_call_then_its_result_continues_the_conversation(client: openai.OpenAI, server: ScriptedLLMServer):
    messages: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = client.chat.completions.create(model="conductor", messages=messages, tools=[WEATHER])
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris", "unit": "C"}
    assert worker_calls(server)[0].body["tools"][0]["function"]["name"] == "get_weather"

    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "21"},
    ]
    second = client.chat.completions.create(model="conductor", messages=messages, tools=[WEATHER])
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content == "It is 21 degrees C in Paris."
    seen = worker_calls(server)[-1].messages[-1]["content"]
    assert f"result of call {call.id}" in seen and "called get_weather" in seen


def test_a_streamed_tool_call_arrives_as_openai_deltas(client: openai.OpenAI):
    stream = client.chat.completions.create(
        model="conductor",
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        stream=True,
    )
    deltas = [c.choices[0] for c in stream if c.choices]
    assert deltas[0].delta.role == "assistant" and deltas[0].delta.content is None  # a call, never text
    parts = [t for d in deltas for t in d.delta.tool_calls or []]
    assert parts[0].index == 0 and parts[0].id and parts[0].function and parts[0].function.name == "get_weather"
    arguments = "".join(p.function.arguments or "" for p in parts if p.function)
    assert json.loads(arguments) == {"city": "Paris", "unit": "C"}
    assert deltas[-1].finish_reason == "tool_calls"


def test_responses_text_format_and_a_function_call_round_trip(client: openai.OpenAI):
    answered = client.responses.parse(model="conductor", input="Capital of France?", text_format=City)
    assert answered.status == "completed" and answered.output_parsed == City(name="Paris", population=2_100_000)
    assert answered.text.format.type == "json_schema"

    tool = {"type": "function", **WEATHER["function"]}
    first = client.responses.create(model="conductor", input="Weather in Paris?", tools=[tool])  # type: ignore[list-item]
    (item,) = first.output
    assert item.type == "function_call" and item.name == "get_weather"
    assert json.loads(item.arguments) == {"city": "Paris", "unit": "C"}
    follow = [
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": item.call_id, "name": item.name, "arguments": item.arguments},
        {"type": "function_call_output", "call_id": item.call_id, "output": "21"},
    ]
    second = client.responses.create(model="conductor", input=follow, tools=[tool])  # type: ignore[arg-type, list-item]
    assert second.output_text == "It is 21 degrees C in Paris."


def test_a_streamed_response_function_call_has_argument_events(client: openai.OpenAI):
    tool = {"type": "function", **WEATHER["function"]}
    events = list(
        client.responses.create(
            model="conductor",
            input="Weather in Paris?",
            tools=[tool],
            tool_choice="required",
            stream=True,  # type: ignore[list-item]
        )
    )
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.delta" in kinds and kinds[-1] == "response.completed"
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert json.loads(done.arguments) == {"city": "Paris", "unit": "C"}


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"logprobs": True}, "logprobs"),
        ({"n": 2}, "n > 1"),
        ({"functions": [WEATHER["function"]]}, "functions"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
        ({"prediction": {"type": "content", "content": "x"}}, "prediction"),
        ({"frobnicate": 1}, "frobnicate"),
        ({"tool_choice": "required"}, "needs tools"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "nope"),
        ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "only function tools"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 7}}}},
            "valid JSON Schema",
        ),
        ({"response_format": {"type": "json_object"}, "tools": [WEATHER]}, "together with tools"),
        ({"logit_bias": {"50256": -100}}, "logit_bias"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop takes up to 4"),
        ({"stop": ""}, "non-empty"),
    ],
)
def test_a_field_that_would_change_the_answer_and_cannot_be_honoured_is_a_400_naming_it(
    h: ApiHarness, extra: dict[str, Any], named: str
):
    body = {"model": "conductor", "messages": [{"role": "user", "content": "hi"}], **extra}
    r = h.client.post("/v1/chat/completions", json=body, headers=h.headers(h.key("acme")))
    assert r.status_code == 400, r.text
    assert named in r.json()["error"]["message"]
    assert not worker_calls(h.server), "nothing ran"


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"logprobs": True}, "logprobs"),
        ({"n": 2}, "n"),
        ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
        ({"frobnicate": 1}, "frobnicate"),
        ({"tools": [WEATHER, {"type": "custom", "custom": {"name": "x"}}]}, "tools.1.type"),
        ({"response_format": {"type": "json_object"}, "tools": [WEATHER]}, "tools"),
    ],
)
def test_the_official_client_reads_the_refused_field_from_the_errors_param(
    client: openai.OpenAI, extra: dict[str, Any], param: str
):
    """OpenAI names the field at fault in `error.param`; the SDK hands it to the caller as `.param`."""
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="conductor", messages=[{"role": "user", "content": "hi"}], extra_body=extra
        )
    assert caught.value.param == param


def test_responses_refuses_what_it_cannot_honour(h: ApiHarness):
    key = h.key("acme")
    for extra, named in [
        ({"previous_response_id": "resp_x"}, "previous_response_id"),
        ({"top_logprobs": 3}, "top_logprobs"),
    ]:
        r = h.client.post("/v1/responses", json={"model": "conductor", "input": "hi", **extra}, headers=h.headers(key))
        assert r.status_code == 400 and named in r.json()["error"]["message"], r.text


class Capital(BaseModel):
    city: str = Field(max_length=24)
    continent: Literal["Europe", "Asia", "Africa", "America", "Oceania"]


@contextmanager
def embedded_client(home: Path, pool: Callable[[str], Pool]) -> Iterator[tuple[openai.OpenAI, ScriptedLLMServer]]:
    """The official client on an embedded API whose pool is `pool(URL of a scripted server)`, and that server."""
    server = ScriptedLLMServer(script).start()
    settings = Settings(
        home=home,
        broker_url="memory://",
        pool_file=write_pool(pool(server.base_url), home / "pool.yaml"),
        recursion=False,
    )
    try:
        with TestClient(create_app(settings)) as http:
            key = ApiHarness(http, server, home).key("acme")
            yield openai.OpenAI(base_url="http://testserver/v1", api_key=key, http_client=http, max_retries=0), server
    finally:
        server.stop()


def tool_first_pool(base_url: str) -> Pool:
    """The scripted Conductor's one step goes to worker 0, here the calculator; the scripted model is worker 1."""
    pool = scripted_pool(base_url).model_dump()
    pool["workers"] = [{"name": "calc", "model": "tool/calculator", "description": "calculator"}, pool["workers"][0]]
    return Pool.model_validate(pool)


def test_a_plan_ending_with_a_tool_gets_its_formatted_answer_written_by_a_model(tmp_path: Path):
    """The shipped Conductor often hands the last step to python or the calculator, which cannot write JSON
    or a function call: the tool runs, then a model writes the formatted answer from its result."""
    with embedded_client(tmp_path, tool_first_pool) as (client, server):
        done = client.chat.completions.parse(
            model="conductor", messages=[{"role": "user", "content": "What is 17 * 23?"}], response_format=City
        )
        assert done.choices[0].message.parsed == City(name="Paris", population=2_100_000)
        (writer,) = worker_calls(server)
        assert "It answered:\n391" in writer.messages[-1]["content"], "the model sees the tool's result"
        assert writer.body["response_format"]["json_schema"]["schema"]["required"] == ["name", "population"]

        first = client.chat.completions.create(
            model="conductor",
            messages=[{"role": "user", "content": "Weather in Paris?"}],
            tools=[WEATHER],
            tool_choice="required",
        )
        assert first.choices[0].finish_reason == "tool_calls"
        assert [c.function.name for c in first.choices[0].message.tool_calls or []] == ["get_weather"]


def local_pool(base_url: str) -> Pool:
    """The scripted Conductor over one worker: SmolLM2-135M, run in the worker's own process."""
    local = {"model": "local/smollm2-135m-instruct", "max_tokens": 48, "temperature": 0.0}
    pool = scripted_pool(base_url).model_dump()
    pool["workers"] = [{**local, "name": "smol", "description": "a small local model"}]
    return Pool.model_validate(pool)


@pytest.mark.slow
@pytest.mark.parametrize("deployment", ["embedded", pytest.param("production", marks=pytest.mark.services)])
def test_the_local_model_answers_the_official_clients_checks(
    deployment: str, tmp_path: Path, request: pytest.FixtureRequest
):
    """The same checks with SmolLM2-135M writing the answers under the schema's grammar: `parse` with a
    Pydantic model, a streamed JSON-schema answer, a forced function call and its follow-up, `responses.parse`."""
    if not (MODEL_HOME / "models" / "smollm2-135m-instruct" / "config.json").exists():
        pytest.fail("the local model is missing: run `make model` (the test command does)")
    (tmp_path / "models").symlink_to(MODEL_HOME / "models")
    if deployment == "embedded":
        with embedded_client(tmp_path, local_pool) as (client, _):
            _local_model_checks(client)
        return
    pg_url, redis_url = request.getfixturevalue("pg_url"), request.getfixturevalue("redis_db")
    with deploy(tmp_path, pg_url, redis_url, script, pool=local_pool, worker_names=("w1",), concurrency=1) as d:
        _local_model_checks(d.client(d.key("acme")))


def _local_model_checks(client: openai.OpenAI) -> None:
    done = client.chat.completions.parse(
        model="conductor",
        messages=[{"role": "user", "content": "Which city is the capital of France?"}],
        response_format=Capital,
    )
    parsed = done.choices[0].message.parsed
    assert isinstance(parsed, Capital) and parsed.city

    stream = client.chat.completions.create(
        model="conductor",
        messages=[{"role": "user", "content": "Name a big city and its population."}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "city", "schema": City.model_json_schema(), "strict": True},
        },
        stream=True,
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert isinstance(City.model_validate_json(text), City)

    messages: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = client.chat.completions.create(
        model="conductor", messages=messages, tools=[WEATHER], tool_choice="required"
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "get_weather"
    arguments = json.loads(call.function.arguments)
    assert isinstance(arguments["city"], str) and arguments["unit"] in ("C", "F")
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "21 degrees C"},
    ]
    second = client.chat.completions.create(model="conductor", messages=messages, tools=[WEATHER], tool_choice="none")
    assert second.choices[0].finish_reason in ("stop", "length") and second.choices[0].message.content

    answered = client.responses.parse(
        model="conductor", input="Which city is the capital of Japan?", text_format=Capital
    )
    assert answered.status == "completed" and isinstance(answered.output_parsed, Capital)
