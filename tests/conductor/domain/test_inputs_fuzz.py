"""Bad input, fuzzed: whatever bytes or values a problem file holds, every loader answers each
line with a Problem or a clear per-line InputError, never crashes, and loses no good line; whole-
file problems (empty file, a directory) are one clear InputError."""

from __future__ import annotations

import json
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conductor.domain.errors import InputError
from conductor.domain.inputs import FORMATS, read_problems
from conductor.domain.problem import Problem

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# The fields each format reads, so wrong types reach every converter branch.
FIELDS = {
    "jsonl": ["id", "question", "answer", "choices", "tests", "entry_point", "kind", "rubric", "metadata"],
    "gsm8k": ["question", "answer"],
    "math500": ["problem", "solution", "answer", "subject", "level", "unique_id"],
    "aime24": ["id", "problem", "solution", "answer", "url", "year"],
    "mmlu": ["question", "answer_a", "answer_b", "answer_c", "answer_d", "correct_answer", "topic"],
    "humaneval": ["task_id", "prompt", "canonical_solution", "test", "entry_point"],
    "mbpp": ["task_id", "prompt", "code", "test_list", "test_imports", "source_file"],
}
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=6,
)


def _good(i: int) -> bytes:
    return json.dumps({"id": f"good-{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)}).encode()


def _read(path: Path, fmt: str | None = "jsonl") -> list[tuple[int, Problem | InputError]]:
    return list(read_problems(path, format=fmt))


def _check_per_line(items: list[tuple[int, Problem | InputError]], unit: str = "line") -> None:
    for number, item in items:
        assert isinstance(item, (Problem, InputError)), item
        if isinstance(item, InputError):
            assert str(item).startswith(f"{unit} {number}: "), str(item)
            assert len(str(item)) < 2000  # a clear line, not a dump of the input


@FUZZ
@given(junk=st.lists(st.binary(min_size=1, max_size=200).filter(lambda b: b"\n" not in b and b.strip()), max_size=12),
       order=st.randoms(use_true_random=False))  # fmt: skip
def test_binary_garbage_between_good_lines_is_reported_per_line_and_loses_nothing(tmp_path, junk, order):
    lines = [("good", _good(i)) for i in range(5)] + [("junk", b) for b in junk]
    order.shuffle(lines)
    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(b"\n".join(raw for _, raw in lines) + b"\n")
    items = _read(path)
    _check_per_line(items)
    ids = {item.id for _, item in items if isinstance(item, Problem)}
    assert {f"good-{i}" for i in range(5)} <= ids
    good_lines = {n + 1 for n, (kind, _) in enumerate(lines) if kind == "good"}
    assert good_lines <= {n for n, item in items if isinstance(item, Problem)}


@FUZZ
@given(fmt=st.sampled_from(FORMATS), data=st.data())
def test_wrong_types_in_every_field_give_one_clear_error_or_a_problem(tmp_path, fmt, data):
    record = {f: data.draw(JSON_VALUES, label=f) for f in FIELDS[fmt] if data.draw(st.booleans(), label=f"has {f}")}
    path = tmp_path / ("fuzz.json" if fmt == "mbpp" else "fuzz.jsonl")
    if fmt == "mbpp":
        path.write_text(json.dumps([record, json.loads(_good(0))]), encoding="utf-8")
    else:
        path.write_bytes(json.dumps(record).encode() + b"\n" + _good(0) + b"\n")
    items = _read(path, fmt)
    _check_per_line(items, "record" if fmt == "mbpp" else "line")
    assert [n for n, _ in items][:1] == [1]  # the fuzzed record is answered, not skipped


@FUZZ
@given(text=st.text(alphabet=string.printable + "éß€𝔘\x00", max_size=300))
def test_any_text_line_is_a_problem_or_a_per_line_error(tmp_path, text):
    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(text.replace("\n", " ").encode("utf-8", "surrogatepass") + b"\n" + _good(1) + b"\n")
    items = _read(path)
    _check_per_line(items)
    assert any(isinstance(item, Problem) and item.id == "good-1" for _, item in items)


def test_invalid_utf8_is_named_with_its_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(_good(0) + b"\n" + b'{"question": "caf\xe9 \xff"}\n' + _good(2) + b"\n")
    items = _read(path)
    assert [type(item).__name__ for _, item in items] == ["Problem", "InputError", "Problem"]
    assert str(items[1][1]).startswith("line 2: not valid UTF-8")


def test_a_10mb_line_is_read_and_the_next_line_is_not_lost(tmp_path):
    path = tmp_path / "big.jsonl"
    huge = json.dumps({"id": "huge", "question": "x" * (10 << 20)}).encode()
    broken = b'{"id": "broken", "question": "' + b"y" * (10 << 20)  # no closing quote
    path.write_bytes(huge + b"\n" + broken + b"\n" + _good(3) + b"\n")
    items = _read(path)
    _check_per_line(items)
    assert isinstance(items[0][1], Problem) and len(items[0][1].question) == 10 << 20
    assert isinstance(items[1][1], InputError) and str(items[1][1]).startswith("line 2: invalid JSON")
    assert isinstance(items[2][1], Problem) and items[2][1].id == "good-3"


def test_an_empty_file_yields_nothing_or_one_clear_error(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    assert _read(path) == []
    with pytest.raises(InputError, match="cannot tell the format"):
        _read(path, None)
    path.write_bytes(b"\n \n\t\n")
    assert _read(path) == []


def test_a_directory_is_refused_with_a_clear_error(tmp_path):
    with pytest.raises(InputError, match="is a directory"):
        _read(tmp_path)
