"""Specification of problem-file reading: every benchmark file loads whole, bad lines are named."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from conductor.domain.errors import InputError
from conductor.domain.inputs import FORMATS, detect_format, read_problems
from conductor.domain.problem import Problem

DATA = Path(__file__).resolve().parents[3].parent / "shared" / "data"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="shared/data not present")


def load(path, **kw) -> tuple[list[Problem], list[tuple[int, InputError]]]:
    good, bad = [], []
    for number, item in read_problems(path, **kw):
        if isinstance(item, Problem):
            good.append(item)
        else:
            assert isinstance(item, InputError)
            bad.append((number, item))
    return good, bad


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# ------------------------------------------------------------------ the real benchmark files


@needs_data
@pytest.mark.parametrize(
    ("name", "fmt", "count", "kind"),
    [
        ("gsm8k_test.jsonl", "gsm8k", 1319, "math"),
        ("gsm8k_train.jsonl", "gsm8k", 7473, "math"),
        ("math500_test.jsonl", "math500", 500, "math"),
        ("aime24.jsonl", "aime24", 30, "math"),
        ("mmlu_test.jsonl.gz", "mmlu", 14042, "mc"),
        ("HumanEval.jsonl.gz", "humaneval", 164, "code"),
        ("mbpp_sanitized.json", "mbpp", 427, "code"),
    ],
)
def test_real_files_load_completely(name, fmt, count, kind):
    assert detect_format(DATA / name) == fmt
    good, bad = load(DATA / name)
    assert len(good) == count
    assert all(p.kind == kind and p.has_reference for p in good)
    assert len({p.id for p in good}) == count
    if fmt == "mmlu":
        assert [n for n, _ in bad] == [11777, 12794]
        assert all("stray header row" in str(e) for _, e in bad)
    else:
        assert bad == []


@needs_data
def test_gsm8k_reference_is_the_final_number():
    first = next(p for _, p in read_problems(DATA / "gsm8k_test.jsonl"))
    assert first.answer == "18"
    assert first.id == "gsm8k_test-1"
    assert first.metadata == {"source": "gsm8k"}
    assert "Janet" in first.question


@needs_data
def test_math500_keeps_subject_level_and_id():
    first = next(p for _, p in read_problems(DATA / "math500_test.jsonl"))
    assert first.id == "test/precalculus/807.json"
    assert first.answer == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert first.metadata["subject"] == "Precalculus" and first.metadata["level"] == 2


@needs_data
def test_aime24_answer_and_id():
    first = next(p for _, p in read_problems(DATA / "aime24.jsonl"))
    assert first.answer == "204" and first.kind == "math" and first.id == "60"


@needs_data
def test_mmlu_question_shows_the_lettered_choices():
    first = next(p for _, p in read_problems(DATA / "mmlu_test.jsonl.gz"))
    assert first.answer == "D" and len(first.choices) == 4
    for letter, choice in zip("ABCD", first.choices, strict=True):
        assert f"{letter}) {choice}" in first.question
    assert first.metadata["topic"] == "moral scenarios"


@needs_data
def test_humaneval_has_prompt_tests_and_entry_point():
    first = next(p for _, p in read_problems(DATA / "HumanEval.jsonl.gz"))
    assert first.id == "HumanEval/0"
    assert first.entry_point == "has_close_elements"
    assert "def has_close_elements(numbers: List[float], threshold: float) -> bool:" in first.question
    assert "Complete" in first.question
    assert "def check(candidate)" in first.tests


@needs_data
def test_mbpp_shows_first_assert_and_joins_imports_with_tests():
    problems, _ = load(DATA / "mbpp_sanitized.json")
    first = problems[0]
    assert first.id == "2" and first.entry_point == "similar_elements"
    assert "assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))" in first.question
    assert first.tests.count("assert") == 3
    with_imports = next(p for p in problems if p.tests.startswith("import math"))
    assert "\nassert " in with_imports.tests
    assert all(p.entry_point for p in problems)


@needs_data
def test_mbpp_test_split():
    problems, bad = load(DATA / "mbpp_sanitized.json", mbpp_test_split=True)
    assert len(problems) == 257 and not bad
    assert all(11 <= int(p.id) <= 510 for p in problems)


# ------------------------------------------------------------------ the user format


def test_user_jsonl_reports_each_bad_line_and_loads_the_rest(tmp_path):
    path = write_lines(
        tmp_path / "mine.jsonl",
        [
            json.dumps({"question": "What is 2+2?", "answer": 4, "kind": "math"}),  # 1 good
            '{"question": "unterminated',  # 2 bad JSON
            json.dumps({"answer": "3"}),  # 3 no question
            "",  # 4 blank: skipped, still counted
            json.dumps({"question": 12}),  # 5 wrong type
            json.dumps({"question": "Q", "choices": "A or B"}),  # 6 wrong type
            json.dumps({"question": "Q", "difficulty": "hard"}),  # 7 unknown field
            json.dumps({"question": "Q", "kind": "essay"}),  # 8 bad kind
            json.dumps(["not", "an", "object"]),  # 9 not an object
            json.dumps({"id": "x1", "question": "Name a colour.", "rubric": "any colour", "metadata": {"t": 1}}),  # 10
            json.dumps({"question": "   "}),  # 11 empty question
            json.dumps({"question": "Q", "metadata": [1]}),  # 12 bad metadata
        ],
    )
    good, bad = load(path)
    assert [p.id for p in good] == ["mine-1", "x1"]
    assert good[0].answer == "4" and good[0].kind == "math"
    assert good[1].rubric == "any colour" and good[1].metadata == {"t": 1}
    messages = {n: str(e) for n, e in bad}
    assert sorted(messages) == [2, 3, 5, 6, 7, 8, 9, 11, 12]
    assert messages[2].startswith("line 2: invalid JSON")
    assert messages[3] == "line 3: missing required field 'question'"
    assert messages[5] == "line 5: field 'question' must be a string, got int"
    assert "line 6: field 'choices' must be a list of strings" == messages[6]
    assert "line 7: unknown field(s) 'difficulty'" in messages[7]
    assert messages[8].startswith("line 8: field 'kind'")
    assert messages[9] == "line 9: expected a JSON object, got list"
    assert messages[11] == "line 11: field 'question' is empty"
    assert messages[12].startswith("line 12: field 'metadata'")


def test_user_choices_become_lettered_and_answer_text_becomes_a_letter(tmp_path):
    path = write_lines(
        tmp_path / "mc.jsonl",
        [
            json.dumps({"question": "Which is a fruit?", "choices": ["carrot", "apple"], "answer": "apple"}),
            json.dumps({"question": "Pick: A) x B) y", "choices": ["x", "y"], "answer": "B"}),
        ],
    )
    (first, second), bad = load(path)
    assert not bad
    assert first.kind == "mc" and first.answer == "B"
    assert first.question.endswith("A) carrot\nB) apple")
    assert second.question == "Pick: A) x B) y" and second.answer == "B"


def test_user_tests_imply_code(tmp_path):
    path = write_lines(tmp_path / "c.jsonl", [json.dumps({"question": "Write f.", "tests": "assert f() == 1"})])
    ((_, problem),) = list(read_problems(path))
    assert problem.kind == "code"


def test_gzip_and_json_array_files(tmp_path):
    rows = [{"question": "a"}, {"question": "b", "extra": 1}, {"question": "c"}]
    gz = tmp_path / "set.jsonl.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as fh:
        fh.write("\n".join(json.dumps(r) for r in rows))
    assert [(n, type(x).__name__) for n, x in read_problems(gz)] == [(1, "Problem"), (2, "InputError"), (3, "Problem")]
    arr = tmp_path / "set.json"
    arr.write_text(json.dumps(rows))
    good, bad = load(arr)
    assert [p.id for p in good] == ["set-1", "set-3"]
    assert str(bad[0][1]).startswith("record 2: unknown field(s) 'extra'")


def test_truncated_gzip_reports_where_it_broke(tmp_path):
    data = gzip.compress(("\n".join(json.dumps({"question": f"q{i}"}) for i in range(2000)) + "\n").encode())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    good, bad = load(path)
    assert 0 < len(good) < 2000
    assert len(bad) == 1 and "corrupt or truncated" in str(bad[0][1])


def test_bad_utf8_line_is_reported(tmp_path):
    path = tmp_path / "u.jsonl"
    path.write_bytes(b'{"question": "ok"}\n{"question": "\xff"}\n')
    good, bad = load(path)
    assert len(good) == 1 and bad[0][0] == 2 and "not valid UTF-8" in str(bad[0][1])


def test_format_override_and_detection_by_fields(tmp_path):
    path = write_lines(tmp_path / "anything.jsonl", [json.dumps({"question": "2+3?", "answer": "2+3=5\n#### 5"})])
    assert detect_format(path) == "gsm8k"
    ((_, problem),) = list(read_problems(path))
    assert problem.answer == "5"
    ((_, raw),) = list(read_problems(path, format="jsonl"))
    assert raw.answer == "2+3=5\n#### 5"
    ((_, wrong),) = list(read_problems(path, format="math500"))
    assert isinstance(wrong, InputError) and "'problem'" in str(wrong)


def test_gsm8k_line_without_final_number(tmp_path):
    path = write_lines(tmp_path / "gsm8k_x.jsonl", [json.dumps({"question": "q", "answer": "no marker"})])
    ((n, err),) = list(read_problems(path, format="gsm8k"))
    assert n == 1 and "#### " in str(err)


def test_mmlu_bad_letter(tmp_path):
    row = {"question": "q", "answer_a": "1", "answer_b": "2", "answer_c": "3", "answer_d": "4", "correct_answer": "E"}
    path = write_lines(tmp_path / "m.jsonl", [json.dumps(row)])
    ((_, err),) = list(read_problems(path))
    assert "correct_answer must be one of A-D, got 'E'" in str(err)


def test_errors_raised_up_front(tmp_path):
    path = write_lines(tmp_path / "p.jsonl", [json.dumps({"question": "q"})])
    with pytest.raises(InputError, match="unknown problem format 'csv'"):
        read_problems(path, format="csv")  # no iteration needed
    with pytest.raises(InputError, match="no such problem file"):
        read_problems(tmp_path / "missing.jsonl")
    odd = write_lines(tmp_path / "odd.jsonl", [json.dumps({"prompt": "x"})])
    with pytest.raises(InputError, match="cannot tell the format"):
        read_problems(odd)
    broken = tmp_path / "broken.json"
    broken.write_text("[{")
    with pytest.raises(InputError, match="not a valid JSON array"):
        read_problems(broken)
    assert set(FORMATS) == {"jsonl", "gsm8k", "math500", "aime24", "mmlu", "humaneval", "mbpp"}
