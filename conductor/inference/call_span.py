"""One span per model call, in the OpenTelemetry GenAI semantic conventions (made by the gateway
only while tracing is on).

`gen_ai.operation.name` (`chat`, or `execute_tool` for a tool worker), `gen_ai.provider.name` (the
litellm prefix: `openai`, `hosted_vllm`, `local`, ...), `gen_ai.request.model`, the sampling
parameters, and once answered `gen_ai.usage.input_tokens` / `gen_ai.usage.output_tokens`; ours beside
them: the worker (or `conductor`), its policy version, the attempts and the cost. The messages and
the answer (`gen_ai.input.messages`, `gen_ai.output.messages`) only when
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`; the API key is never read here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry.trace import Span, SpanKind

from conductor import telemetry
from conductor.config.pool import ModelSpec
from conductor.domain.tools import TOOL_PROVIDER
from conductor.inference.completion import Completion

__all__ = ["model_call_span", "record_answer"]


@contextmanager
def model_call_span(spec: ModelSpec, messages: list[dict[str, Any]], *, label: str) -> Iterator[Span]:
    tool = spec.provider == TOOL_PROVIDER
    operation = "execute_tool" if tool else "chat"
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": spec.provider,
        "gen_ai.request.model": spec.model,
        "conductor.worker.name": label,
    }
    if not tool:
        attributes |= {"gen_ai.request.max_tokens": spec.max_tokens, "gen_ai.request.temperature": spec.temperature}
    version = getattr(spec, "policy_version", None)
    if version:
        attributes["conductor.policy.version"] = version
    if telemetry.capture_content():
        attributes["gen_ai.input.messages"] = json.dumps(messages, default=str)
    with telemetry.tracer().start_as_current_span(
        f"{operation} {spec.model}", kind=SpanKind.CLIENT, attributes=attributes
    ) as span:
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
