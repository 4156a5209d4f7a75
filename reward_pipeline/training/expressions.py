"""Arithmetic expressions that compute a training problem's answer: the calculator plans a warm-up can verify.

GSM8K's train solutions mark each computation as ``<<48/2=24>>``. Composing those steps into one
expression (a later step's use of an earlier result becomes the earlier step in brackets) gives the
input that makes the pool's calculator return the reference answer, so a one-step plan
``calculator(expression)`` is a plan whose success the system checks by running it, not by trusting
the annotation: a composed expression is kept only when the calculator's value equals the reference.
Human-written questions, not templates of ours, so a Conductor trained on them is tested fairly on
word problems written elsewhere.
"""

from __future__ import annotations

import ast
import json
import re
from fractions import Fraction
from pathlib import Path

from conductor.domain.calculator import calculate
from conductor.domain.errors import VerifierError
from conductor.domain.inputs import read_problems
from conductor.domain.problem import Problem
from reward_pipeline.verifiers.base import parse_number
from reward_pipeline.verifiers.number import NumberVerifier

__all__ = ["compose_expression", "expression_problems", "grounded", "operator_count", "verified"]

_STEP = re.compile(r"<<([^=<>]+)=([^<>]+)>>")
_NUMBER = re.compile(r"(?<![\d.])\d+(?:\.\d+)?(?![\d.])")
#: Numbers an expression may use without the question writing them: what "half", "twice", "dozen",
#: "per cent", "a week", "an hour" and "a day" stand for.
WORD_CONSTANTS = frozenset({"2", "3", "4", "7", "10", "12", "24", "60", "100"})


def grounded(expression: str, question: str) -> bool:
    """Whether every number of ``expression`` is written in ``question`` or is a word constant: an
    expression built from the solution's intermediate results teaches nothing a reader could copy."""
    written = set(_NUMBER.findall(question.replace(",", "")))
    return all(n in written or n in WORD_CONSTANTS for n in _NUMBER.findall(expression))


def operator_count(expression: str) -> int:
    # A leading or bracketed minus sign is not an operation between two numbers.
    return len(re.findall(r"(?<=[\d)])\s*[+\-*/]", expression))


def compose_expression(solution: str) -> str | None:
    """The steps of a GSM8K solution as one expression whose value is the last step's, or None.

    A number in a later step that equals an earlier step's result stands for that step (the latest
    one, as the solution reads); a number that merely coincides with a result is replaced too,
    which changes nothing about the value, so the check in :func:`verified` is what decides. The
    expression is written in one canonical form (spaced operators, only the brackets precedence
    needs), so that the warm-up teaches one way to write it, as the generated arithmetic writes it.
    """
    steps = [(lhs.strip(), rhs.strip()) for lhs, rhs in _STEP.findall(solution)]
    if not steps:
        return None
    built: dict[Fraction | None, str] = {}  # a step's result -> the expression that computes it
    expression = ""

    def earlier(number: re.Match[str]) -> str:
        step = built.get(parse_number(number.group(0)))
        return f"({step})" if step else number.group(0)

    for lhs, rhs in steps:
        expression = _NUMBER.sub(earlier, lhs.replace("x", "*").replace("×", "*").replace(",", ""))
        built[parse_number(rhs)] = expression
    try:
        return ast.unparse(ast.parse(expression, mode="eval"))
    except SyntaxError:
        return None


def verified(expression: str, answer: str) -> bool:
    """Whether the calculator, given ``expression`` as its subtask, answers what the reward's number
    verifier marks right against ``answer`` (the same check a rollout of the plan would get)."""
    result = calculate([expression])
    if result.value is None:
        return False  # "undefined (division by zero)" quotes numbers that are not an answer
    try:
        return NumberVerifier().verify(result.text, Problem(question=expression, answer=answer)).correct
    except VerifierError:  # a reference without a number: nothing to verify against
        return False


def expression_problems(path: Path, n: int | None = None, *, operators: tuple[int, ...] = (1, 2)) -> list[Problem]:
    """The first ``n`` (default: all) GSM8K problems of ``path`` whose composed expression has a number of
    operations in ``operators``, is :func:`grounded` in the question and makes the calculator answer the
    reference; the expression is in ``metadata``."""
    out: list[Problem] = []
    solutions = _solutions(path)
    for number, item in read_problems(path, format="gsm8k"):
        if n is not None and len(out) >= n:
            break
        solution = solutions.get(number)
        if not isinstance(item, Problem) or item.answer is None or solution is None:
            continue
        expression = compose_expression(solution)
        if (
            expression is None
            or operator_count(expression) not in operators
            or not grounded(expression, item.question)
            or not verified(expression, item.answer)
        ):
            continue
        out.append(item.model_copy(update={"metadata": {**item.metadata, "expression": expression}}))
    return out


def _solutions(path: Path) -> dict[int, str]:
    """Annotated solutions by 1-based line number (the problem reader keeps only the reference)."""
    out: dict[int, str] = {}
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and isinstance(record.get("answer"), str):
                out[number] = record["answer"]
    return out
