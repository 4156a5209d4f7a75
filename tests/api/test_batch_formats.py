"""Batch API lines shape their answers as chat requests do: a line's `response_format`, `tools` and
`tool_choice` reach the worker that writes the final answer and shape the line's output body, and a field
that would change the answer and cannot be honoured (or is unknown) is that line's error, naming the field,
while the other lines run. An embedded system (SQLite, in-process worker) over the scripted pool of the
structured-output checks."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from conductor.config.settings import Settings
from tests.api.conftest import ApiHarness
from tests.api.test_structured_outputs import WEATHER, City, script
from tests.support.cluster import write_pool
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import ScriptedLLMServer

CITY_FORMAT = {"type": "json_schema", "json_schema": {"name": "city", "schema": City.model_json_schema()}}


@pytest.fixture
def h(tmp_path: Path) -> Iterator[ApiHarness]:
    server = ScriptedLLMServer(script).start()
    pool_file = write_pool(scripted_pool(server.base_url), tmp_path / "pool.yaml")
    settings = Settings(home=tmp_path, broker_url="memory://", pool_file=pool_file, recursion=False, batch_sweep_s=0.2)
    try:
        with TestClient(create_app(settings)) as client:
            yield ApiHarness(client, server, tmp_path)
    finally:
        server.stop()


def line(custom_id: str, question: str, **body: Any) -> dict[str, Any]:
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "conductor", "messages": [{"role": "user", "content": question}], **body},
    }


def run_batch(h: ApiHarness, lines: list[dict[str, Any]], **headers: str) -> tuple[dict, dict[str, dict]]:
    """The ended batch and its output and error lines by custom_id."""
    auth = h.headers(h.key("acme", scopes=["files", "batches"]))
    data = ("\n".join(json.dumps(x) for x in lines) + "\n").encode()
    f = h.client.post("/v1/files", headers=auth, files={"file": ("in.jsonl", data)}, data={"purpose": "batch"})
    batch = h.client.post(
        "/v1/batches",
        headers={**auth, **headers},
        json={"input_file_id": f.json()["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"},
    ).json()
    deadline = time.monotonic() + 90
    while batch["status"] not in ("completed", "failed", "expired", "cancelled"):
        assert time.monotonic() < deadline, batch
        time.sleep(0.2)
        batch = h.client.get(f"/v1/batches/{batch['id']}", headers=auth).json()
    records: dict[str, dict] = {}
    for file_id in (batch["output_file_id"], batch["error_file_id"]):
        if file_id:
            for raw in h.client.get(f"/v1/files/{file_id}/content", headers=auth).text.splitlines():
                rec = json.loads(raw)
                records[rec["custom_id"]] = rec
    return batch, records


def message(rec: dict) -> dict:
    assert rec["response"]["status_code"] == 200, rec
    return rec["response"]["body"]["choices"][0]


def test_a_lines_response_format_and_tools_shape_its_answer_as_on_the_chat_route(h: ApiHarness):
    batch, out = run_batch(
        h,
        [
            line("schema", "Which is the capital of France?", response_format=CITY_FORMAT),
            line("object", "Give me the answer.", response_format={"type": "json_object"}, temperature=0.2),
            line("call", "What is the weather in Paris?", tools=[WEATHER], tool_choice="required"),
            line("plain", "Say something."),
            line("stopped", "Say something.", stop=[" wo"]),
        ],
    )
    assert batch["request_counts"] == {"total": 5, "completed": 5, "failed": 0}
    assert City.model_validate_json(message(out["schema"])["message"]["content"]).name == "Paris"
    assert json.loads(message(out["object"])["message"]["content"]) == {"answer": 42}
    call = message(out["call"])
    assert call["finish_reason"] == "tool_calls" and call["message"]["content"] is None
    (tool_call,) = call["message"]["tool_calls"]
    assert tool_call["function"]["name"] == "get_weather"
    assert json.loads(tool_call["function"]["arguments"]) == {"city": "Paris", "unit": "C"}
    assert message(out["plain"])["message"]["content"] == "plain words"
    assert message(out["stopped"])["message"]["content"] == "plain"

    # Each worker was asked in its backend's terms, as the chat route asks it.
    by_question = {c.messages[0]["content"].split("\n")[0]: c.body for c in h.server.calls_for("scripted-worker")}
    assert by_question["Which is the capital of France?"]["response_format"]["json_schema"]["schema"]["required"] == [
        "name",
        "population",
    ]
    assert by_question["What is the weather in Paris?"]["tools"][0]["function"]["name"] == "get_weather"
    assert "response_format" not in by_question["Say something."] and "tools" not in by_question["Say something."]


def test_a_line_whose_answer_never_conforms_fails_and_is_not_returned_as_text(h: ApiHarness):
    batch, out = run_batch(h, [line("bad", "[never-json] Capital?", response_format=CITY_FORMAT)])
    assert batch["request_counts"]["failed"] == 1
    response = out["bad"]["response"]
    assert response["status_code"] != 200 and "not JSON" in response["body"]["error"]["message"]


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"logprobs": True}, "logprobs is not supported"),
        ({"n": 2}, "n > 1"),
        ({"functions": [WEATHER["function"]]}, "functions is not supported"),
        ({"frobnicate": 1}, "unknown field 'frobnicate'"),
        ({"response_format": {"type": "xml"}}, "body.response_format.type"),
        ({"response_format": {"type": "json_object"}, "tools": [WEATHER]}, "together with tools"),
        ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "only function tools"),
        ({"tool_choice": "required"}, "needs tools"),
        ({"logit_bias": {"50256": -100}}, "logit_bias is not supported"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop takes up to 4"),
    ],
)
def test_a_field_a_line_cannot_have_honoured_is_that_lines_error_naming_it(h: ApiHarness, body: dict, named: str):
    batch, out = run_batch(h, [line("good", "Say something."), line("refused", "Say something else.", **body)])
    assert batch["request_counts"] == {"total": 2, "completed": 1, "failed": 1}
    assert out["refused"]["response"] is None and named in out["refused"]["error"]["message"], out["refused"]
    assert message(out["good"])["message"]["content"] == "plain words"
    asked = [c.messages[0]["content"] for c in h.server.calls_for("scripted-worker")]
    assert asked == ["Say something."], "the refused line never ran"
