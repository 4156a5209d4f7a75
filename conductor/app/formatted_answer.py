"""The step that writes a formatted final answer: asked for the format, checked against it, given one
corrective retry when it misses, then failed with the reason (the job then ends with a clear error,
never with an answer the client cannot parse)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from conductor.domain.answer_format import AnswerFormat
from conductor.domain.errors import AnswerFormatError
from conductor.inference.completion import Completion

#: One model call with a format: the step's messages in, the completion out.
FormattedCall = Callable[[list[dict[str, Any]], AnswerFormat], Completion]


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
    both = replace(
        second,
        prompt_tokens=first.prompt_tokens + second.prompt_tokens,
        completion_tokens=first.completion_tokens + second.completion_tokens,
        cost_usd=first.cost_usd + second.cost_usd,
        latency_s=first.latency_s + second.latency_s,
    )
    try:
        fmt.check(both.text)
    except AnswerFormatError as again:
        raise AnswerFormatError(f"{again} (first attempt: {problem}; after one corrective retry)") from again
    return both
