"""The python tool's pure half: it picks the code a step hands it, and every way a run ends becomes an answer."""

from __future__ import annotations

import pytest

from conductor.domain.prompts import build_step_messages
from conductor.domain.python_tool import NO_CODE, ProgramRun, answer_of, error_of, find_code, program_for
from conductor.domain.tools import is_tool_miss, run_tool


@pytest.mark.parametrize(
    ("texts", "code"),
    [
        (["2 ** 10"], "2 ** 10"),
        (["x = [3, 1, 2]\nprint(sorted(x))"], "x = [3, 1, 2]\nprint(sorted(x))"),
        (["Here it is:\n```python\nlen('strawberry')\n```\nDone."], "len('strawberry')"),
        (["```py\n1 + 1\n```", "ignored"], "1 + 1"),
        (["```\nfirst = 1\n```\nthen\n```python\nsecond = 2\n```"], "second = 2"),
        (["Compute this:\nsum(range(10))"], "sum(range(10))"),
        (["The answer is 42.", "What is 6 * 7?", "6 * 7"], "6 * 7"),
    ],
)
def test_it_finds_the_code_in_the_first_text_that_has_some(texts, code):
    assert find_code(texts) == code


@pytest.mark.parametrize("text", ["What is the capital of France?", "Paris", "42", "", "   ", "x" * 9000 + " + 1"])
def test_prose_a_lone_word_or_number_and_huge_text_are_not_code(text):
    assert find_code([text]) is None


def test_the_program_carries_the_code_as_a_literal_not_as_source_of_its_own():
    program = program_for("print('hi')\n'''")
    compile(program, "<test>", "exec")  # an unbalanced quote in the code cannot break the wrapper
    assert repr("print('hi')\n'''") in program


def test_an_error_reported_by_the_program_is_read_back_from_its_stderr():
    stderr = "noise\nconductor-python-tool-error: ZeroDivisionError: division by zero\n"
    assert error_of(stderr) == "ZeroDivisionError: division by zero"
    assert error_of("Traceback (most recent call last):\n") is None


@pytest.mark.parametrize(
    ("run", "answer"),
    [
        (ProgramRun(stdout="3\n", error=None), "3"),
        (ProgramRun(stdout="partial\n", error="ZeroDivisionError: division by zero"),
         "Error: ZeroDivisionError: division by zero"),
        (ProgramRun(stdout="", error="timeout after 5s"), "Error: timeout after 5s"),
    ],
)  # fmt: skip
def test_a_run_becomes_its_output_or_its_error(run, answer):
    assert answer_of(run) == answer


def test_a_long_printout_is_cut_to_its_end():
    answer = answer_of(ProgramRun(stdout="x" * 5000 + "END", error=None))
    assert answer.endswith("END") and len(answer) <= 2001


def test_no_code_is_a_tool_miss_without_running_anything():
    def never(program: str) -> ProgramRun:
        raise AssertionError("nothing should run")

    answer = run_tool("tool/python", build_step_messages("What is the capital of France?", []), execute=never)
    assert answer == NO_CODE and is_tool_miss(answer)
    assert not any(ch.isdigit() for ch in NO_CODE), "a verifier must not read a number out of a miss"


def test_the_code_of_the_latest_visible_step_is_the_one_run():
    ran: list[str] = []

    def record(program: str) -> ProgramRun:
        ran.append(program)
        return ProgramRun(stdout="ok", error=None)

    messages = build_step_messages("Run it.", [("first", "```python\n1 + 1\n```"), ("second", "```python\n2 + 2\n```")])
    assert run_tool("tool/python", messages, execute=record) == "ok"
    assert [repr("2 + 2") in p for p in ran] == [True]


def test_the_python_tool_needs_a_sandbox_to_run_in():
    with pytest.raises(ValueError, match="execute"):
        run_tool("tool/python", build_step_messages("1 + 1", []))
