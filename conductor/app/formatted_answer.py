"""The step that writes a formatted final answer: asked for the format, checked against it, given one
corrective retry when it misses, then failed with the reason (the job then ends with a clear error,
never with an answer the client cannot parse). A tool worker (the calculator, python, an MCP tool) cannot
be asked for a format: it runs as usual and a model writes the formatted answer from its result."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from conductor.domain.answer_format import AnswerFormat
from conductor.domain.errors import AnswerFormatError
from conductor.inference.completion import Completion

#: One model call with a format: the step's messages in, the completion out.
FormattedCall = Callable[[list[dict[str, Any]], AnswerFormat], Completion]
#: One tool call: the step's messages in, its result out.
PlainCall = Callable[[list[dict[str, Any]]], Completion]


def with_instruction(messages: list[dict[str, Any]], fmt: AnswerFormat) -> list[dict[str, Any]]:
    """The step's messages with the format's instruction after its subtask (the last user turn)."""
    last = messages[-1]
    return [*messages[:-1], {**last, "content": f"{last['content']}\n\n{fmt.instruction()}"}]


def formatted_answer(call: FormattedCall, messages: list[dict[str, Any]], fmt: AnswerFormat) -> Completion:
    """A completion whose text `fmt` accepts (its usage counts every call made), or AnswerFormatError."""
    asked = with_instruction(messages, fmt)
    first = call(asked, fmt)
    try:
        fmt.check(first.text)
        return first
    except AnswerFormatError as exc:
        problem = str(exc)
    correction = f"That answer was rejected: {problem}\n\n{fmt.instruction()}"
    second = call([*asked, {"role": "assistant", "content": first.text}, {"role": "user", "content": correction}], fmt)
    both = _together(first, second)
    try:
        fmt.check(both.text)
    except AnswerFormatError as again:
        raise AnswerFormatError(f"{again} (first attempt: {problem}; after one corrective retry)") from again
    return both


def formatted_from_tool(
    tool: PlainCall, write: FormattedCall, question: str, messages: list[dict[str, Any]], fmt: AnswerFormat
) -> Completion:
    """The tool's result on the step's own messages, then a model's answer to `question` from it under `fmt`
    (checked and corrected as `formatted_answer`); one completion served by `<tool>+<writer>`."""
    result = tool(messages)
    shown = (
        f"{question}\n\nA tool ({result.served_by or result.worker}) was given:\n{messages[-1]['content']}\n"
        f"It answered:\n{result.text}\n\nAnswer the question above, using the tool's answer where it helps."
    )
    try:
        written = formatted_answer(write, [{"role": "user", "content": shown}], fmt)
    except AnswerFormatError as exc:
        raise AnswerFormatError(f"the answer a model wrote from the tool's result: {exc}") from exc
    return replace(
        _together(result, written),
        served_by=f"{result.served_by or result.worker}+{written.served_by or written.worker}",
        errors=result.errors + written.errors,
    )


def _together(first: Completion, second: Completion) -> Completion:
    """`second`, charged for both calls."""
    return replace(
        second,
        prompt_tokens=first.prompt_tokens + second.prompt_tokens,
        completion_tokens=first.completion_tokens + second.completion_tokens,
        cost_usd=first.cost_usd + second.cost_usd,
        latency_s=first.latency_s + second.latency_s,
    )
