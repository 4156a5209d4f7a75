"""The code verifier passes real reference solutions (all of HumanEval, a sample of MBPP), fails
wrong ones with the failing assert as the reason, and accepts the answer shapes models produce
(a body, a full function, a fenced block) without being fooled by an early exit."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from conductor.domain.errors import VerifierError
from conductor.domain.problem import Problem
from reward_pipeline.verifiers.code_exec import CodeVerifier, build_program, extract_code
from tests.reward_pipeline._data import humaneval, humaneval_problem, mbpp_problem, mbpp_test

# Two at a time: the reward worker's concurrency on this machine.
WORKERS = 2


def verify_all(pairs: list[tuple[str, Problem]]):
    v = CodeVerifier()
    with ThreadPoolExecutor(WORKERS) as ex:
        return list(ex.map(lambda ap: v.verify(*ap), pairs))


@pytest.mark.slow
def test_every_humaneval_canonical_solution_passes():
    rows = humaneval()
    assert len(rows) == 164
    verdicts = verify_all([(r["canonical_solution"], humaneval_problem(r)) for r in rows])
    failed = {r["task_id"]: v.reason for r, v in zip(rows, verdicts, strict=True) if not v.correct}
    assert failed == {}


def test_humaneval_sample_as_full_functions_in_a_fenced_reply():
    # Every 8th problem: the whole function (prompt + body) inside a ```python block with chatter.
    rows = humaneval()[::8]
    pairs = [
        (f"Here you go:\n```python\n{r['prompt']}{r['canonical_solution']}```\nHope it helps.", humaneval_problem(r))
        for r in rows
    ]
    failed = {r["task_id"]: v.reason for r, v in zip(rows, verify_all(pairs), strict=True) if not v.correct}
    assert failed == {}


def test_humaneval_wrong_bodies_fail_with_the_failing_assert():
    rows = humaneval()[:20]
    verdicts = verify_all([("    return None\n", humaneval_problem(r)) for r in rows])
    assert not any(v.correct for v in verdicts)
    first = verdicts[0]
    assert first.reason.startswith("AssertionError at line")
    assert "assert candidate(" in first.reason
    assert first.details["exit_code"] == 1 and not first.details["timed_out"]


@pytest.mark.slow
def test_mbpp_test_split_sample_passes():
    rows = mbpp_test()
    assert len(rows) == 257
    sample = rows[::4]  # deterministic: 65 problems spread over the split
    verdicts = verify_all([(r["code"], mbpp_problem(r)) for r in sample])
    failed = {r["task_id"]: v.reason for r, v in zip(sample, verdicts, strict=True) if not v.correct}
    assert failed == {}


def test_mbpp_wrong_solution_fails():
    row = next(r for r in mbpp_test() if r["task_id"] == 17)  # square perimeter: 4 * a
    assert CodeVerifier().verify(row["code"], mbpp_problem(row)).correct
    wrong = row["code"].replace("4*a", "4*a+1").replace("4 * a", "4 * a + 1")
    assert wrong != row["code"]
    v = CodeVerifier().verify(wrong, mbpp_problem(row))
    assert not v.correct and "AssertionError" in v.reason


def test_mbpp_test_imports_are_part_of_the_tests():
    row = next(r for r in mbpp_test() if r["test_imports"])
    v = CodeVerifier().verify(row["code"], mbpp_problem(row))
    assert v.correct, v.reason


ADD = Problem(
    question='def add(a: int, b: int) -> int:\n    """Return a + b."""\n',
    kind="code",
    entry_point="add",
    tests="def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n",
)


@pytest.mark.parametrize(
    "answer",
    [
        "    return a + b\n",  # a body, indented (HumanEval completion style)
        "return a + b",  # a body flush-left
        "def add(a, b):\n    return a + b\n",  # the full function
        "```python\ndef add(a, b):\n    return a + b\n```",  # fenced
        (  # the last block wins
            "First a sketch:\n```python\ndef add(a, b):\n    pass\n```\nFinal:\n```python\ndef add(a, b):\n"
            "    return b + a\n```"
        ),
        "```py\nfrom typing import List\n\ndef add(a: int, b: int) -> int:\n    return sum([a, b])\n```",
        "```python\ndef add(a, b):\n    return a + b\n",  # reply cut off before the closing fence
    ],
)
def test_answer_shapes_that_should_pass(answer):
    v = CodeVerifier().verify(answer, ADD)
    assert v.correct, (v.reason, v.details["stderr_tail"])


@pytest.mark.parametrize(
    ("answer", "reason_part"),
    [
        ("    return a - b\n", "AssertionError at line"),
        ("def add(a, b):\n    return a +\n", "SyntaxError"),
        ("def add(a, b):\n    raise ValueError('nope')\n", "ValueError: nope"),
        ("", "empty answer"),
    ],
)
def test_answer_shapes_that_should_fail(answer, reason_part):
    v = CodeVerifier().verify(answer, ADD)
    assert not v.correct
    assert reason_part in v.reason


@pytest.mark.parametrize("exit_call", ["import sys; sys.exit(0)", "import os; os._exit(0)", "quit()", "exit(0)"])
def test_exiting_before_the_tests_run_does_not_pass(exit_call):
    v = CodeVerifier().verify(f"def add(a, b):\n    return 0\n{exit_call}\n", ADD)
    assert not v.correct
    assert v.details["exit_code"] == 0 and not v.details["tests_completed"]
    assert "before the tests finished" in v.reason


def test_program_layout_for_a_body_answer():
    program = build_program("    return a + b\n", ADD, marker="MARK")
    assert program.index('"""Return a + b."""') < program.index("return a + b") < program.index("def check")
    assert program.rstrip().endswith("check(add)\n\nprint('MARK', flush=True)")


def test_extract_code_prefers_the_block_defining_the_entry_point():
    text = "```python\ndef add(a, b):\n    return a + b\n```\nUsage:\n```python\nprint(add(1, 2))\n```"
    assert extract_code(text, "add").startswith("def add")
    assert extract_code(text).startswith("print(")
    assert extract_code("def f(): pass") == "def f(): pass"


def test_problem_without_tests_is_a_verifier_error():
    with pytest.raises(VerifierError):
        CodeVerifier().verify("def f(): pass", Problem(question="q", kind="code"))


def test_verdict_details_are_json_and_carry_the_evidence():
    import json

    v = CodeVerifier().verify("    return a - b\n", ADD)
    d = json.loads(json.dumps(v.as_dict()))["details"]
    assert d["exit_code"] == 1 and d["timed_out"] is False and d["limit_hit"] is None
    assert "AssertionError" in d["stderr_tail"]
    assert d["isolation"]["mode"] in ("namespaces", "user-namespaces", "rlimits")
    assert {"memory_bytes", "cpu_time_s", "wall_time_s", "max_processes"} <= set(d["limits"])
