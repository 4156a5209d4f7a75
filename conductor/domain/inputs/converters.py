"""Converters from one record of each format to a :class:`Problem` (see the package docstring)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from conductor.domain.errors import InputError
from conductor.domain.problem import Problem

_USER_FIELDS = frozenset(Problem.model_fields)
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_GSM8K_ANSWER = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)

Record = dict[str, Any]


def build_problem(**fields: Any) -> Problem:
    """A :class:`Problem`, or an :class:`InputError` that names each field that is wrong."""
    try:
        return Problem(**fields)
    except ValidationError as exc:
        raise InputError(_describe_validation(exc)) from None


def _describe_validation(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "record"
        if err["type"] == "missing":
            parts.append(f"missing required field {where!r}")
        elif err["type"] == "extra_forbidden":
            parts.append(f"unknown field {where!r}")
        else:
            parts.append(f"field {where!r}: {err['msg'].removeprefix('Value error, ')}")
    return "; ".join(parts)


def _require(rec: Record, *fields: str) -> None:
    missing = [f for f in fields if rec.get(f) is None]
    if missing:
        raise InputError(f"missing required field(s) {', '.join(repr(f) for f in missing)}")
    for f in fields:
        if isinstance(rec[f], str) and not rec[f].strip():
            raise InputError(f"field {f!r} is empty")


def _text(value: Any, field: str) -> str:
    """Numbers are fine as ids and answers; bools, lists and objects are not."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise InputError(f"field {field!r} must be a string or a number, got {type(value).__name__}")


def _lettered(question: str, choices: list[str]) -> str:
    lines = "\n".join(f"{_LETTERS[i]}) {c}" for i, c in enumerate(choices))
    return f"{question.rstrip()}\n\n{lines}"


def _convert_jsonl(rec: Record, number: int, stem: str) -> Problem:
    unknown = sorted(set(rec) - _USER_FIELDS)
    if unknown:
        raise InputError(
            f"unknown field(s) {', '.join(repr(u) for u in unknown)}; allowed: {', '.join(sorted(_USER_FIELDS))}"
        )
    fields = dict(rec)
    if "question" not in fields or fields["question"] is None:
        raise InputError("missing required field 'question'")
    if not isinstance(fields["question"], str):
        raise InputError(f"field 'question' must be a string, got {type(fields['question']).__name__}")
    if not fields["question"].strip():
        raise InputError("field 'question' is empty")
    for key in ("id", "answer"):
        if fields.get(key) is not None:
            fields[key] = _text(fields[key], key)
    fields["id"] = fields.get("id") or f"{stem}-{number}"

    choices = fields.get("choices")
    if choices is not None:
        if not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
            raise InputError("field 'choices' must be a list of strings")
        if not 2 <= len(choices) <= len(_LETTERS):
            raise InputError(f"field 'choices' must have 2 to {len(_LETTERS)} entries, got {len(choices)}")
        fields.setdefault("kind", "mc")
        if not all(c in fields["question"] for c in choices):
            fields["question"] = _lettered(fields["question"], choices)
        answer = fields.get("answer")
        if answer is not None and answer in choices and answer.strip().upper() not in _LETTERS[: len(choices)]:
            fields["answer"] = _LETTERS[choices.index(answer)]
    if fields.get("kind") is None and fields.get("tests") is not None:
        fields["kind"] = "code"
    return build_problem(**fields)


def _convert_gsm8k(rec: Record, number: int, stem: str) -> Problem:
    _require(rec, "question", "answer")
    solution = _text(rec["answer"], "answer")
    match = _GSM8K_ANSWER.search(solution)
    if not match:
        raise InputError("GSM8K answer has no final '#### <number>' line")
    reference = match.group(1).replace(",", "").strip()
    return build_problem(
        id=f"{stem}-{number}",
        question=_text(rec["question"], "question"),
        answer=reference,
        kind="math",
        metadata={"source": "gsm8k"},
    )


def _convert_math500(rec: Record, number: int, stem: str) -> Problem:
    _require(rec, "problem", "answer")
    metadata = {"source": "math500"}
    metadata.update({k: rec[k] for k in ("subject", "level", "unique_id") if k in rec})
    uid = rec.get("unique_id")
    return build_problem(
        id=_text(uid, "unique_id") if uid is not None else f"{stem}-{number}",
        question=_text(rec["problem"], "problem"),
        answer=_text(rec["answer"], "answer"),
        kind="math",
        metadata=metadata,
    )


def _convert_aime24(rec: Record, number: int, stem: str) -> Problem:
    _require(rec, "problem", "answer")
    metadata: dict[str, Any] = {"source": "aime24"}
    if "url" in rec:
        metadata["url"] = rec["url"]
    rid = rec.get("id")
    return build_problem(
        id=_text(rid, "id") if rid is not None else f"{stem}-{number}",
        question=_text(rec["problem"], "problem"),
        answer=_text(rec["answer"], "answer").strip(),
        kind="math",
        metadata=metadata,
    )


def _convert_mmlu(rec: Record, number: int, stem: str) -> Problem:
    letters = "ABCD"
    _require(rec, "question", "correct_answer", *(f"answer_{c.lower()}" for c in letters))
    correct = _text(rec["correct_answer"], "correct_answer").strip().upper()
    if correct not in letters:
        if rec["correct_answer"] == "answer":
            raise InputError("stray header row (correct_answer is 'answer'), skipped")
        raise InputError(f"correct_answer must be one of A-D, got {rec['correct_answer']!r}")
    choices = [_text(rec[f"answer_{c.lower()}"], f"answer_{c.lower()}") for c in letters]
    question = _text(rec["question"], "question")
    metadata: dict[str, Any] = {"source": "mmlu"}
    if "topic" in rec:
        metadata["topic"] = rec["topic"]
    return build_problem(
        id=f"{stem}-{number}",
        question=_lettered(question, choices) + "\n\nAnswer with the letter of the correct choice.",
        answer=correct,
        kind="mc",
        choices=choices,
        metadata=metadata,
    )


def _convert_humaneval(rec: Record, number: int, stem: str) -> Problem:
    _require(rec, "task_id", "prompt", "entry_point", "test")
    prompt = _text(rec["prompt"], "prompt")
    entry = _text(rec["entry_point"], "entry_point")
    question = (
        f"```python\n{prompt.rstrip()}\n```\n\n"
        f"Complete the Python function `{entry}` above. Reply with the complete function, "
        "including the signature and any imports it needs, in one python code block."
    )
    return build_problem(
        id=_text(rec["task_id"], "task_id"),
        question=question,
        tests=_text(rec["test"], "test"),
        entry_point=entry,
        kind="code",
        # The code verifier may need the original prompt (its imports and helpers) when a
        # completion returns only the function.
        metadata={"source": "humaneval", "prompt": prompt},
    )


def _convert_mbpp(rec: Record, number: int, stem: str) -> Problem:
    _require(rec, "task_id", "prompt", "test_list")
    tests = rec["test_list"]
    imports = rec.get("test_imports") or []
    if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
        raise InputError("field 'test_list' must be a non-empty list of strings")
    if not isinstance(imports, list) or not all(isinstance(t, str) for t in imports):
        raise InputError("field 'test_imports' must be a list of strings")
    prompt = _text(rec["prompt"], "prompt")
    question = f"{prompt.strip()}\nYour code should pass this test:\n{tests[0]}"
    return build_problem(
        id=_text(rec["task_id"], "task_id"),
        question=question,
        tests="\n".join([*imports, *tests]),
        entry_point=_mbpp_entry_point(rec.get("code"), tests),
        kind="code",
        metadata={"source": "mbpp"},
    )


def _mbpp_entry_point(code: Any, tests: list[str]) -> str | None:
    # The function under test is one the reference solution defines and the asserts call;
    # the first call in an assert may be a builtin wrapper such as set(...).
    defined = re.findall(r"^def\s+(\w+)\s*\(", code, re.MULTILINE) if isinstance(code, str) else []
    called = re.findall(r"(\w+)\s*\(", "\n".join(tests))
    for name in called:
        if name in defined:
            return str(name)
    return None


CONVERTERS: dict[str, Callable[[Record, int, str], Problem]] = {
    "jsonl": _convert_jsonl,
    "gsm8k": _convert_gsm8k,
    "math500": _convert_math500,
    "aime24": _convert_aime24,
    "mmlu": _convert_mmlu,
    "humaneval": _convert_humaneval,
    "mbpp": _convert_mbpp,
}
