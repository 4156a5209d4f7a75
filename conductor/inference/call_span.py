"""One span per model call, in the OpenTelemetry GenAI semantic conventions (made by the gateway
only while tracing is on).

`gen_ai.operation.name` (`chat`, or `execute_tool` with `gen_ai.tool.name` for a tool worker: the
calculator, python, an MCP server's tool), `gen_ai.provider.name` (the litellm prefix: `openai`,
`hosted_vllm`, `local`, ...; `tool`, `mcp`), `gen_ai.request.model`, the sampling parameters, and once
answered `gen_ai.usage.input_tokens` / `gen_ai.usage.output_tokens`; ours beside them: the worker (or
`conductor`), its policy version, the attempts and the cost. The messages and the answer
(`gen_ai.input.messages`, `gen_ai.output.messages`) only when content capture is asked for
(`conductor.telemetry.capture_content`); the API key is never read here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry.trace import Span, SpanKind

from conductor import telemetry
from conductor.config.pool import ModelSpec
from conductor.domain.mcp_tools import MCP_PROVIDER, split_model
from conductor.domain.tools import TOOL_PROVIDER
from conductor.inference.completion import Completion

__all__ = ["call_span_start", "model_call_span", "record_answer"]


def call_span_start(spec: ModelSpec, *, label: str) -> tuple[str, dict[str, Any]]:
    """A call's span name and its attributes before the answer: `chat <model>`, or for a tool worker
    `execute_tool <tool>` (the conventions' name for running a tool)."""
    attributes: dict[str, Any] = {
        "gen_ai.provider.name": spec.provider,
        "gen_ai.request.model": spec.model,
        "conductor.worker.name": label,
    }
    if spec.provider in (TOOL_PROVIDER, MCP_PROVIDER):
        tool = split_model(spec.model)[1] if spec.provider == MCP_PROVIDER else spec.model.split("/", 1)[1]
        attributes |= {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool}
        return f"execute_tool {tool}", attributes
    attributes |= {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.max_tokens": spec.max_tokens,
        "gen_ai.request.temperature": spec.temperature,
    }
    version = getattr(spec, "policy_version", None)
    if version:
        attributes["conductor.policy.version"] = version
    return f"chat {spec.model}", attributes


@contextmanager
def model_call_span(spec: ModelSpec, messages: list[dict[str, Any]], *, label: str) -> Iterator[Span]:
    name, attributes = call_span_start(spec, label=label)
    if telemetry.capture_content():
        attributes["gen_ai.input.messages"] = json.dumps(messages, default=str)
    with telemetry.tracer().start_as_current_span(name, kind=SpanKind.CLIENT, attributes=attributes) as span:
        yield span


def record_answer(span: Span, result: Completion) -> None:
    span.set_attributes(
        {
            "gen_ai.response.model": result.model,
            "gen_ai.usage.input_tokens": result.prompt_tokens,
            "gen_ai.usage.output_tokens": result.completion_tokens,
            "conductor.cost_usd": result.cost_usd,
            "conductor.attempts": result.attempts,
        }
    )
    if telemetry.capture_content():
        span.set_attribute(
            "gen_ai.output.messages",
            json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": result.text}]}]),
        )
