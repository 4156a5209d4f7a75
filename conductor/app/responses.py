"""OpenAI's Responses API over jobs: a response is a job submitted with `options.api = "responses"`,
its id is `resp_<job id>`, and its stream is a pure function of the job's state, so a dropped stream
resumes from any `sequence_number` with the same events it would have seen."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from conductor.app.openai_shapes import answer_of, call_id, job_workflows
from conductor.domain.answer_format import Answer, ToolCall
from conductor.domain.errors import AnswerFormatError, InputError, NotFound
from conductor.domain.states import JobStatus
from conductor.store.models import Checkpoint, Job, Round, Step

PREFIX = "resp_"
API = "responses"
#: Job states as Response states (a job stopped by its budget answered in part: `incomplete`).
STATUS = {
    JobStatus.WAITING.value: "queued",
    JobStatus.QUEUED.value: "queued",
    JobStatus.RUNNING.value: "in_progress",
    JobStatus.DONE.value: "completed",
    JobStatus.BUDGET_EXCEEDED.value: "incomplete",
    JobStatus.FAILED.value: "failed",
    JobStatus.CANCELLED.value: "cancelled",
}
ENDED = frozenset({"completed", "incomplete", "failed", "cancelled"})
DELTA_CHARS = 256
#: The event that closes a stream, per final status (cancelled has no event of its own in OpenAI's list).
CLOSING = {"completed": "response.completed", "incomplete": "response.incomplete"}


def response_id(job_id: str) -> str:
    return PREFIX + job_id


def job_id_of(resp_id: str) -> str:
    if not resp_id.startswith(PREFIX) or len(resp_id) == len(PREFIX):
        raise NotFound(f"no response {resp_id}")
    return resp_id[len(PREFIX) :]


@dataclass(frozen=True)
class Pin:
    """`conductor@<checkpoint>`: the model name the client used and the policy its rounds run."""

    model: str
    policy: dict[str, str] | None


def resolve_model(s: Session, model: str, known: list[str]) -> Pin:
    """A listed model name, or `conductor@<checkpoint id>` pinning that checkpoint's adapter."""
    if model in known:
        return Pin(model, None)
    base, sep, checkpoint_id = model.partition("@")
    if sep and base == "conductor" and checkpoint_id:
        row = s.get(Checkpoint, checkpoint_id)
        if row is not None and row.path:
            return Pin(model, {"version": row.id, "adapter": row.path})
        raise NotFound(f"no checkpoint {checkpoint_id!r} with an adapter (see `conductor checkpoints list`)")
    raise NotFound(f"the model {model!r} does not exist; use one of {known} or conductor@<checkpoint>")


def input_messages(input_: str | list[Any], instructions: str | None) -> list[dict[str, Any]]:
    """Chat messages from `input` (a string, or message items with string or `input_text` parts)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": instructions}] if instructions else []
    if isinstance(input_, str):
        if not input_.strip():
            raise InputError("input is empty")
        return [*messages, {"role": "user", "content": input_}]
    for i, item in enumerate(input_):
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind in ("function_call", "function_call_output"):
            messages.append(_call_turn(item, i))
            continue
        if not isinstance(item, dict) or kind != "message" or "role" not in item:
            raise InputError(f"input[{i}] is not a message item ({{'role': ..., 'content': ...}})")
        if item["role"] not in ("user", "assistant", "system", "developer"):
            raise InputError(f"input[{i}].role {item['role']!r} is not user, assistant, system or developer")
        messages.append({"role": item["role"], "content": _text(item.get("content"), i)})
    if not any(m["role"] == "user" for m in messages):
        raise InputError("input has no user message")
    return messages


def _call_turn(item: dict[str, Any], i: int) -> dict[str, Any]:
    """A function call the model made, or its output the client sends back, as a chat turn."""
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise InputError(f"input[{i}] ({item['type']}) needs its call_id")
    if item["type"] == "function_call_output":
        output = item.get("output")
        return {"role": "tool", "tool_call_id": call_id, "content": output if isinstance(output, str) else str(output)}
    if not isinstance(item.get("name"), str):
        raise InputError(f"input[{i}] (function_call) needs the function's name")
    function = {"name": item["name"], "arguments": str(item.get("arguments") or "{}")}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


def _text(content: Any, i: int) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        kinds = {"input_text", "output_text", "text"}
        if any(p.get("type") not in kinds for p in content):
            raise InputError(f"input[{i}].content: only text parts are supported")
        return "\n".join(str(p.get("text", "")) for p in content)
    raise InputError(f"input[{i}].content must be a string or a list of text parts")


def usage_of(s: Session, job: Job) -> dict[str, Any]:
    """OpenAI's usage (every model call) plus the split: the Conductor's rounds vs the workers' steps."""
    rounds = _sums(s, Round, Round.job_id == job.id, Round.kind.in_(("plan", "replan")))
    steps = _sums(s, Step, Step.job_id == job.id, Step.attempts > 0)

    def part(row: Any) -> dict[str, Any]:
        return {
            "calls": int(row[0]),
            "input_tokens": int(row[1]),
            "output_tokens": int(row[2]),
            "cost_usd": float(row[3]),
        }

    return {
        "input_tokens": job.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": job.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": job.prompt_tokens + job.completion_tokens,
        "conductor": part(rounds),
        "workers": part(steps),
    }


def _sums(s: Session, model: type[Round] | type[Step], *where: Any) -> Any:
    """Calls, prompt and completion tokens, and cost of the rows `where` selects."""
    return s.execute(
        select(
            func.count(),
            func.coalesce(func.sum(model.prompt_tokens), 0),
            func.coalesce(func.sum(model.completion_tokens), 0),
            func.coalesce(func.sum(model.cost_usd), 0.0),
        ).where(*where)
    ).one()


def response_object(s: Session, job: Job) -> dict[str, Any]:
    status = STATUS[str(job.status)]
    opts = job.options or {}
    output = []
    error = None
    if status == "failed":
        error = {"code": "server_error", "message": job.error or "the job failed"}
    if status in ("completed", "incomplete"):
        try:
            output = [_output_item(job, answer_of(job), status)]
        except AnswerFormatError as exc:  # never an answer the client cannot parse, as a success
            status, error = "failed", {"code": "answer_format", "message": str(exc)}
    return {
        "id": response_id(job.id),
        "object": "response",
        "created_at": int(job.created_at.timestamp()),
        "status": status,
        "background": bool(opts.get("background")),
        "model": opts.get("model", "conductor"),
        "instructions": opts.get("instructions"),
        "metadata": opts.get("metadata") or {},
        "output": output,
        "error": error,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "usage": usage_of(s, job) if status in ENDED else None,
        "parallel_tool_calls": False,
        **_format_fields(opts.get("answer_format")),
        "conductor": {"job_id": job.id, "workflows": job_workflows(s, [job.id])[job.id], "cost_usd": job.cost_usd},
    }


def _format_fields(fmt: dict[str, Any] | None) -> dict[str, Any]:
    """The request's tools, tool_choice and text.format, as a response echoes them."""
    out: dict[str, Any] = {"tool_choice": "none", "tools": [], "text": {"format": {"type": "text"}}}
    if fmt and fmt["kind"] == "tools":
        out["tools"] = [{"type": "function", "strict": False, **f} for f in fmt["functions"]]
        choice = fmt["tool_choice"]
        out["tool_choice"] = choice if choice in ("auto", "required") else {"type": "function", "name": choice}
    elif fmt and fmt["kind"] == "json_schema":
        schema = {"name": fmt["name"], "schema": fmt["schema"], "strict": fmt["strict"]}
        out["text"] = {"format": {"type": "json_schema", **schema}}
    elif fmt:
        out["text"] = {"format": {"type": "json_object"}}
    return out


def _output_item(job: Job, answer: Answer, status: str) -> dict[str, Any]:
    if isinstance(answer, ToolCall):
        return {
            "type": "function_call",
            "id": f"fc_{job.id}",
            "call_id": call_id(job),
            "name": answer.name,
            "arguments": answer.arguments_json,
            "status": "completed",
        }
    return _message(job, answer.text, status)


def _message(job: Job, text: str, status: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{job.id}",
        "status": "completed" if status == "completed" else "incomplete",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def as_created(response: dict[str, Any]) -> dict[str, Any]:
    """The response as it was when created: what the stream's first events carry, whenever asked."""
    blank: dict[str, Any] = {"status": "queued", "output": [], "error": None, "incomplete_details": None, "usage": None}
    return {**response, **blank, "conductor": {"job_id": response["conductor"]["job_id"]}}


def stream_events(start: dict[str, Any], final: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Every event of the stream so far: `start` is the response as created (queued); `final` the
    ended response, or None while it runs. The same inputs always give the same events."""
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": start},
        {"type": "response.in_progress", "response": {**start, "status": "in_progress"}},
    ]
    if final is not None:
        if final["output"]:
            events += _output_events(final["output"][0])
        closing = CLOSING.get(final["status"], "response.failed")
        events.append({"type": closing, "response": final})
    return [{**e, "sequence_number": i} for i, e in enumerate(events)]


def _output_events(item: dict[str, Any]) -> list[dict[str, Any]]:
    if item["type"] == "function_call":
        return _call_events(item)
    text = item["content"][0]["text"]
    ids = {"item_id": item["id"], "output_index": 0}
    part = {"type": "output_text", "text": "", "annotations": []}
    return [
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**item, "status": "in_progress", "content": []},
        },
        {"type": "response.content_part.added", **ids, "content_index": 0, "part": part},
        *(
            {
                "type": "response.output_text.delta",
                **ids,
                "content_index": 0,
                "delta": text[i : i + DELTA_CHARS],
                "logprobs": [],
            }
            for i in range(0, len(text), DELTA_CHARS)
        ),
        {"type": "response.output_text.done", **ids, "content_index": 0, "text": text, "logprobs": []},
        {"type": "response.content_part.done", **ids, "content_index": 0, "part": {**part, "text": text}},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
    ]


def _call_events(item: dict[str, Any]) -> list[dict[str, Any]]:
    """A function call's events, as OpenAI streams one: added, its arguments in pieces, done."""
    arguments = item["arguments"]
    ids = {"item_id": item["id"], "output_index": 0}
    return [
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**item, "arguments": "", "status": "in_progress"},
        },
        *(
            {"type": "response.function_call_arguments.delta", **ids, "delta": arguments[i : i + DELTA_CHARS]}
            for i in range(0, len(arguments), DELTA_CHARS)
        ),
        {"type": "response.function_call_arguments.done", **ids, "name": item["name"], "arguments": arguments},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
    ]
