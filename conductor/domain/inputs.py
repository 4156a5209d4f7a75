"""Problem files: our own JSONL format and the benchmark files in ``shared/data``, as :class:`Problem` s.

:func:`read_problems` yields ``(number, Problem | InputError)``: a batch of 10,000 lines with
three bad ones should load 9,997 problems and name the three bad lines, not stop at the first.
Numbers are 1-based line numbers for JSONL and 1-based record numbers for a JSON array.
Files may be gzip-compressed (detected from their magic bytes, not their name).

Formats (:data:`FORMATS`)
    ``jsonl``      ours: ``question`` (required), ``id``, ``answer``, ``choices``, ``tests``,
                   ``entry_point``, ``kind`` (math|mc|code|text), ``rubric``, ``metadata``;
                   any other field is an error for that line. Numeric ``id``/``answer`` are
                   read as strings. With ``choices`` and no ``kind``, kind is ``mc`` and the
                   lettered choices are appended to the question unless it already shows every
                   choice; an ``answer`` equal to a choice's text becomes its letter. With
                   ``tests`` and no ``kind``, kind is ``code``.
    ``gsm8k``      question/answer; the reference is the number after ``#### ``.
    ``math500``    problem/answer/subject/level/unique_id; id = unique_id.
    ``aime24``     problem/answer (any problem/answer math file without unique_id).
    ``mmlu``       question, answer_a..answer_d, correct_answer, topic; the question shows the
                   lettered choices; rows whose correct_answer is not A-D (the two stray header
                   rows of the MMLU dump) are reported as errors.
    ``humaneval``  task_id/prompt/entry_point/test; the question asks to complete the function.
    ``mbpp``       JSON array of task_id/prompt/code/test_imports/test_list; the question shows
                   the first assert so the model sees the expected name and signature;
                   ``mbpp_test_split=True`` keeps only the test split (task ids 11-510).

The format is detected from the first record's fields (they are distinctive for every
benchmark) and, failing that, from the file name; ``format=`` overrides both. Ids default
to ``"<stem>-<number>"``.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from pydantic import ValidationError

from conductor.domain.errors import InputError
from conductor.domain.problem import Problem

__all__ = ["FORMATS", "detect_format", "read_problems"]

FORMATS = ("jsonl", "gsm8k", "math500", "aime24", "mmlu", "humaneval", "mbpp")

_USER_FIELDS = frozenset(Problem.model_fields)
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_GSM8K_ANSWER = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)
_MBPP_TEST_IDS = range(11, 511)
_BLANK = object()
# How many leading lines detection may skip (blank or broken) looking for a first record.
_DETECT_LINES = 100

Record = dict[str, Any]
Item = tuple[int, Problem | InputError]


def read_problems(path: str | Path, *, format: str | None = None, mbpp_test_split: bool = False) -> Iterator[Item]:
    """Yield ``(number, Problem or InputError)`` for every record of ``path``.

    Raises :class:`InputError` before yielding anything when the file cannot be opened or is
    not JSON at all (a JSON array file is parsed up front), the format name is unknown, or the
    format cannot be detected; problems with single records are yielded, never raised.
    """
    path = Path(path)
    if format is not None and format not in FORMATS:
        raise InputError(f"unknown problem format {format!r}; known formats: {', '.join(FORMATS)}")
    source = _Source(path)
    fmt = format or _detect(source)
    return _problems(source, _CONVERTERS[fmt], fmt == "mbpp" and mbpp_test_split)


def detect_format(path: str | Path) -> str:
    """The format of ``path`` from its first record's fields, else from its name."""
    return _detect(_Source(Path(path)))


def _detect(source: _Source) -> str:
    first: Record | None = None
    for _, record in source.records(limit=_DETECT_LINES):
        if isinstance(record, dict):
            first = record
            break
    fmt = (_format_from_fields(first) if first is not None else None) or _format_from_name(source.path.name)
    if fmt is None:
        raise InputError(
            f"cannot tell the format of {source.path.name}: no recognisable JSON object in its first records; "
            f"pass one of {', '.join(FORMATS)}"
        )
    return fmt


def _problems(source: _Source, convert: Callable[[Record, int, str], Problem], test_split: bool) -> Iterator[Item]:
    unit = source.unit
    for number, record in source.records():
        if isinstance(record, InputError):
            yield number, record
            continue
        if not isinstance(record, dict):
            yield number, InputError(f"{unit} {number}: expected a JSON object, got {type(record).__name__}")
            continue
        if test_split and record.get("task_id") not in _MBPP_TEST_IDS:
            continue
        try:
            yield number, convert(record, number, source.stem)
        except InputError as exc:
            yield number, InputError(f"{unit} {number}: {exc}")


# ---------------------------------------------------------------- reading


class _Source:
    """One problem file: JSONL (streamed line by line) or a JSON array (loaded whole), maybe gzipped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.stem = _stem(path)
        if path.is_dir():
            raise InputError(f"{path} is a directory, not a problem file")
        if not path.is_file():
            raise InputError(f"no such problem file: {path}")
        try:
            with path.open("rb") as fh:
                self.gzipped = fh.read(2) == b"\x1f\x8b"
            with self._open() as fh:
                head = fh.read(4096)
        except (OSError, EOFError) as exc:
            if not self.gzipped or path.name.endswith(".gz"):
                raise InputError(f"cannot read {path}: {exc}") from exc
            # Not gzip after all, just a first line starting with its magic bytes: read the file
            # as text, so that line is reported and the others are kept.
            self.gzipped = False
            with self._open() as fh:
                head = fh.read(4096)
        self.array: list[Any] | None = None
        if head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"["):
            self.array = self._load_array()
        self.unit = "record" if self.array is not None else "line"

    def _open(self) -> IO[bytes]:
        if self.gzipped:
            return gzip.open(self.path, "rb")  # type: ignore[return-value]  # GzipFile is a binary IO
        return self.path.open("rb")

    def _load_array(self) -> list[Any]:
        try:
            with self._open() as fh:
                data = json.loads(fh.read().decode("utf-8-sig"))
        except (OSError, EOFError) as exc:
            raise InputError(f"cannot read {self.path}: {exc}") from exc
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise InputError(f"{self.path.name} is not a valid JSON array: {exc}") from exc
        if not isinstance(data, list):  # pragma: no cover - "[" prefix guarantees a list or an error
            raise InputError(f"{self.path.name}: expected a JSON array of problems")
        return data

    def records(self, limit: int | None = None) -> Iterator[tuple[int, object]]:
        """(number, decoded JSON value or InputError); blank JSONL lines are skipped but keep their numbers."""
        if self.array is not None:
            yield from enumerate(self.array[:limit] if limit else self.array, start=1)
            return
        try:
            fh = self._open()
        except OSError as exc:  # the file vanished since __init__
            raise InputError(f"cannot read {self.path}: {exc}") from exc
        with fh:
            number = 0
            while limit is None or number < limit:
                number += 1
                try:
                    raw = fh.readline()
                except (OSError, EOFError) as exc:
                    # A truncated or corrupt gzip stream: report where it broke, then stop.
                    yield number, InputError(f"line {number}: file is corrupt or truncated here ({exc})")
                    return
                if not raw:
                    return
                value = _decode_line(raw, number)
                if value is not _BLANK:
                    yield number, value


def _decode_line(raw: bytes, number: int) -> object:
    try:
        text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
    except UnicodeDecodeError as exc:
        return InputError(f"line {number}: not valid UTF-8 ({exc.reason} at byte {exc.start})")
    if not text.strip():
        return _BLANK
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        return InputError(f"line {number}: invalid JSON: {exc.msg} (column {exc.colno})")
    except RecursionError:
        return InputError(f"line {number}: invalid JSON: nested too deeply")


# ---------------------------------------------------------------- detection


def _format_from_fields(rec: Record) -> str | None:
    keys = set(rec)
    if {"task_id", "prompt", "test_list"} <= keys:
        return "mbpp"
    if {"task_id", "prompt", "entry_point", "test"} <= keys:
        return "humaneval"
    if {"answer_a", "answer_b", "correct_answer"} <= keys:
        return "mmlu"
    if {"problem", "answer", "unique_id"} <= keys:
        return "math500"
    if {"problem", "answer"} <= keys:
        return "aime24"
    if keys == {"question", "answer"} and isinstance(rec["answer"], str) and "####" in rec["answer"]:
        return "gsm8k"
    if "question" in keys:
        return "jsonl"
    return None


def _format_from_name(name: str) -> str | None:
    lowered = name.lower()
    for fmt, hints in (
        ("gsm8k", ("gsm8k",)),
        ("math500", ("math500", "math-500", "math_500")),
        ("aime24", ("aime",)),
        ("mmlu", ("mmlu",)),
        ("humaneval", ("humaneval", "human_eval", "human-eval")),
        ("mbpp", ("mbpp",)),
    ):
        if any(h in lowered for h in hints):
            return fmt
    return None


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".jsonl", ".json"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    return name or "problems"


# ---------------------------------------------------------------- converters


def _build(**fields: Any) -> Problem:
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
            parts.append(f"field {where!r}: {err['msg']}")
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
    return _build(**fields)


def _convert_gsm8k(rec: Record, number: int, stem: str) -> Problem:
    _require(rec, "question", "answer")
    solution = _text(rec["answer"], "answer")
    match = _GSM8K_ANSWER.search(solution)
    if not match:
        raise InputError("GSM8K answer has no final '#### <number>' line")
    reference = match.group(1).replace(",", "").strip()
    return _build(
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
    return _build(
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
    return _build(
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
    return _build(
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
    return _build(
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
    return _build(
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


_CONVERTERS: dict[str, Callable[[Record, int, str], Problem]] = {
    "jsonl": _convert_jsonl,
    "gsm8k": _convert_gsm8k,
    "math500": _convert_math500,
    "aime24": _convert_aime24,
    "mmlu": _convert_mmlu,
    "humaneval": _convert_humaneval,
    "mbpp": _convert_mbpp,
}
