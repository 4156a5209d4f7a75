"""A model call's span in the OpenTelemetry GenAI conventions (`conductor.inference.call_span`): its name and
attributes, and the prompts and answers only when content capture is asked for. Recorded by an in-memory
exporter of a provider of the test's own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from conductor import telemetry
from conductor.config.pool import WorkerSpec
from conductor.inference.call_span import call_span_start, model_call_span, record_answer
from conductor.inference.completion import Completion

MESSAGES = [{"role": "user", "content": "What is 17 * 23? secret-question"}]


def worker(model: str) -> WorkerSpec:
    return WorkerSpec(name="w", model=model, description="d")


@pytest.fixture
def exported(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(telemetry, "tracer", lambda: provider.get_tracer("test"))
    yield exporter


def one_call(exporter: InMemorySpanExporter, model: str) -> ReadableSpan:
    with model_call_span(worker(model), MESSAGES, label="w") as span:
        record_answer(span, Completion(text="391 secret-answer", model=model, worker="w", prompt_tokens=9))
    (done,) = exporter.get_finished_spans()
    return done


def test_a_model_call_is_a_chat_span_with_the_request_and_its_usage(exported):
    span = one_call(exported, "openai/gpt-5")
    assert span.name == "chat openai/gpt-5"
    attrs = dict(span.attributes or {})
    assert attrs["gen_ai.operation.name"] == "chat" and attrs["gen_ai.provider.name"] == "openai"
    assert (attrs["gen_ai.usage.input_tokens"], attrs["gen_ai.usage.output_tokens"]) == (9, 0)


@pytest.mark.parametrize(
    ("model", "name", "tool"),
    [
        ("tool/calculator", "execute_tool calculator", "calculator"),
        ("mcp/time/get_current_time", "execute_tool get_current_time", "get_current_time"),
    ],
)
def test_a_tool_workers_call_is_an_execute_tool_span_naming_the_tool(model: str, name: str, tool: str):
    span_name, attrs = call_span_start(worker(model), label="w")
    assert span_name == name
    assert attrs["gen_ai.operation.name"] == "execute_tool" and attrs["gen_ai.tool.name"] == tool
    assert "gen_ai.request.temperature" not in attrs, "no sampling: a program, not a model"


def test_no_prompt_or_answer_is_recorded_unless_capture_is_asked_for(exported, monkeypatch):
    monkeypatch.setattr(telemetry, "_capture", False)
    quiet = one_call(exported, "openai/gpt-5")
    assert not [v for v in (quiet.attributes or {}).values() if "secret" in str(v)]
    exported.clear()
    monkeypatch.setattr(telemetry, "_capture", True)
    told = dict(one_call(exported, "openai/gpt-5").attributes or {})
    assert "secret-question" in str(told["gen_ai.input.messages"])
    assert "secret-answer" in str(told["gen_ai.output.messages"])


@pytest.mark.parametrize(
    ("value", "captures"),
    [
        (None, False),
        ("", False),
        ("false", False),
        ("NO_CONTENT", False),
        ("EVENT_ONLY", False),  # content in events, which this project does not emit
        ("true", True),
        ("True", True),
        ("SPAN_ONLY", True),
        ("span_and_event", True),
    ],
)
def test_content_capture_follows_the_genai_conventions_variable(value: str | None, captures: bool):
    assert telemetry.captures_on_spans(value) is captures
