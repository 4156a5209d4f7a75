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

from collections.abc import Callable, Iterator
from pathlib import Path

from conductor.domain.errors import InputError
from conductor.domain.inputs.converters import CONVERTERS, Record, build_problem
from conductor.domain.inputs.source import Source
from conductor.domain.problem import Problem

__all__ = ["FORMATS", "MBPP_TEST_IDS", "build_problem", "detect_format", "read_problems"]

FORMATS = ("jsonl", "gsm8k", "math500", "aime24", "mmlu", "humaneval", "mbpp")

#: MBPP's test split, by task id (the rest are its prompt, train and validation splits).
MBPP_TEST_IDS = range(11, 511)
# How many leading lines detection may skip (blank or broken) looking for a first record.
_DETECT_LINES = 100

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
    source = Source(path)
    fmt = format or _detect(source)
    return _problems(source, CONVERTERS[fmt], fmt == "mbpp" and mbpp_test_split)


def detect_format(path: str | Path) -> str:
    """The format of ``path`` from its first record's fields, else from its name."""
    return _detect(Source(Path(path)))


def _detect(source: Source) -> str:
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


def _problems(source: Source, convert: Callable[[Record, int, str], Problem], test_split: bool) -> Iterator[Item]:
    unit = source.unit
    for number, record in source.records():
        if isinstance(record, InputError):
            yield number, record
            continue
        if not isinstance(record, dict):
            yield number, InputError(f"{unit} {number}: expected a JSON object, got {type(record).__name__}")
            continue
        if test_split and record.get("task_id") not in MBPP_TEST_IDS:
            continue
        try:
            yield number, convert(record, number, source.stem)
        except InputError as exc:
            yield number, InputError(f"{unit} {number}: {exc}")


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
