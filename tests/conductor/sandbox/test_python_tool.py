"""The python tool run for real in the sandbox: values, printouts and errors are answers, and the
sandbox's limits (time, network) hold for the tool's programs too."""

from __future__ import annotations

import time

import pytest

from conductor.domain.prompts import build_step_messages
from conductor.domain.tools import run_tool
from conductor.sandbox import PYTHON_TOOL_LIMITS, SandboxLimits, detect_isolation, run_tool_program


def python(subtask: str, seen: list[tuple[str, str]] | None = None) -> str:
    return run_tool("tool/python", build_step_messages(subtask, seen or []), execute=run_tool_program)


def test_an_expression_answers_with_its_value():
    assert python("2 ** 100") == str(2**100)
    assert python("'strawberry'.count('r')") == "3"
    assert python("sorted([3, 1, 2])") == "[1, 2, 3]"


def test_a_string_value_answers_without_quotes():
    assert python("'abc'.upper()") == "ABC"


def test_a_program_answers_with_what_it_printed_then_its_final_value():
    assert python("for i in range(3):\n    print(i)") == "0\n1\n2"
    assert python("total = sum(range(101))\nprint('sum:')\ntotal") == "sum:\n5050"


def test_it_runs_the_fenced_code_the_step_before_it_wrote():
    written = "Here is the program:\n```python\nwords = 'the cat sat'.split()\nlen(words)\n```"
    assert python("Run the code above.", [("Write Python counting the words of 'the cat sat'.", written)]) == "3"


def test_an_exception_is_the_answer_not_a_failed_step():
    assert python("1 / 0") == "Error: ZeroDivisionError: division by zero"
    assert python("undefined_name + 1") == "Error: NameError: name 'undefined_name' is not defined"


def test_an_infinite_loop_ends_with_a_timeout_answer():
    started = time.monotonic()
    assert python("while True:\n    pass") == f"Error: timeout after {PYTHON_TOOL_LIMITS.wall_time_s:g}s"
    assert time.monotonic() - started < PYTHON_TOOL_LIMITS.wall_time_s + 10


def test_running_out_of_memory_is_an_answer():
    answer = run_tool(
        "tool/python",
        build_step_messages("blob = bytearray(1 << 30)", []),
        execute=lambda program: run_tool_program(program, SandboxLimits(wall_time_s=5.0, memory_bytes=256 << 20)),
    )
    assert answer.startswith("Error: MemoryError"), answer


def test_the_network_is_unreachable_from_the_tool():
    if not detect_isolation().network:
        pytest.skip(f"the {detect_isolation().mode} sandbox mode does not claim network isolation")
    code = "import socket\nsocket.create_connection(('127.0.0.1', 6379), timeout=2)\n'connected'"
    answer = python(code)
    assert answer.startswith("Error: ") and "connected" not in answer.removeprefix("Error: "), answer


def test_the_tool_cannot_see_this_process_files_in_tmp(tmp_path):
    if not detect_isolation().private_tmp:
        pytest.skip(f"the {detect_isolation().mode} sandbox mode does not claim a private /tmp")
    marker = tmp_path / "secret.txt"
    marker.write_text("s3cret")
    assert python(f"import os\nos.path.exists({str(marker)!r})") == "False"
