"""The calculator worker: exact arithmetic over the text a step can see.

A language model that writes `23 * 17` correctly often computes it wrongly; a calculator never does,
but cannot read a word problem. A workflow that pairs them (a model writes the expression, the
calculator evaluates it) is the smallest plan where a second step pays off, which is what lets the
retraining loop learn multi-step plans on a pool of 135M models.

Evaluation walks the parsed expression tree (numbers, + - * /, unary minus, parentheses) and never
calls `eval`: the input is model output. Sizes are capped so a hostile expression cannot make the
worker spin (no powers, bounded length and magnitude).
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["NO_EXPRESSION", "CalculatorResult", "calculate", "find_expressions", "uses_numbers_of"]

MAX_EXPRESSION_CHARS = 200
MAX_MAGNITUDE = 1e15

#: What the calculator answers when it finds nothing to compute: an answer (the step completes and
#: the verifier scores it wrong), not an error, so a plan that misuses the calculator is a bad plan,
#: not a failed job. It holds no digit, so no verifier can read a number out of it.
NO_EXPRESSION = "No arithmetic expression found: give the calculator numbers joined by + - * / and brackets."

_OPS: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
# A run of numbers, operators, parentheses and spaces that starts and ends with a number or bracket.
_CANDIDATE = re.compile(r"(?:(?<![\w).])-)?[\d(.][\d\s.+\-*/()]*[\d)]")
_HAS_OPERATOR = re.compile(r"[\d)]\s*[+\-*/]\s*[-\d(.]")
# "3 x 4", the multiplication and division signs, and thousands separators, as models write them.
_TIMES = re.compile(r"(?<=[\d)])\s*[x×]\s*(?=[\d(])")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_NUMBER = re.compile(r"\d+(?:\.\d+)?|\.\d+")


@dataclass(frozen=True)
class CalculatorResult:
    expression: str | None
    value: float | None
    text: str


def find_expressions(text: str) -> list[str]:
    """Arithmetic expressions in `text`, in order of appearance (at least one operator each)."""
    text = _THOUSANDS.sub("", text).replace("÷", "/").replace("−", "-")
    text = _TIMES.sub(" * ", text)
    out = []
    for match in _CANDIDATE.finditer(text):
        candidate = _balance(match.group(0).strip())
        if candidate and _HAS_OPERATOR.search(candidate) and len(candidate) <= MAX_EXPRESSION_CHARS:
            out.append(candidate)
    return out


def uses_numbers_of(text: str, source: str) -> bool:
    """Whether the expression the calculator evaluates in ``text`` has a number written in ``source``.

    A Conductor that writes the calculator's expression takes its numbers from the question; one whose
    expression shares none of them made it up (``'12 * 3 + 4'`` for "Which planet is the largest?").
    True where ``text`` holds nothing to evaluate: that is a miss of its own (``NO_EXPRESSION``).
    """
    result = calculate([text])
    if result.expression is None:
        return True
    written = {float(n) for n in _NUMBER.findall(_THOUSANDS.sub("", source))}
    return any(float(n) in written for n in _NUMBER.findall(result.expression))


def calculate(texts: Sequence[str]) -> CalculatorResult:
    """Evaluate the last expression in the first of `texts` that has one that evaluates.

    The caller orders `texts` by priority (a step's visible responses, latest first, then its subtask).
    """
    for text in texts:
        for expression in reversed(find_expressions(text)):
            try:
                value = _walk(ast.parse(expression, mode="eval").body)
            except ZeroDivisionError:
                return CalculatorResult(expression, None, f"{expression} is undefined (division by zero).")
            except (SyntaxError, ValueError, OverflowError, RecursionError):
                continue  # not arithmetic, or too large: an earlier expression may still be
            return CalculatorResult(expression, value, _format(value))
    return CalculatorResult(None, None, NO_EXPRESSION)


def _balance(candidate: str) -> str:
    # A match may take a bracket from the prose around it ("(see 3 + 4)" or "sum (3 + 4"): drop
    # unmatched brackets at the ends rather than reject the expression.
    while candidate.count("(") > candidate.count(")") and candidate.startswith("("):
        candidate = candidate[1:].strip()
    while candidate.count(")") > candidate.count("(") and candidate.endswith(")"):
        candidate = candidate[:-1].strip()
    return candidate


def _walk(node: ast.expr) -> float:
    # Every intermediate value is capped, so the result is finite and within MAX_MAGNITUDE.
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        value = float(node.value)
    elif isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        value = _OPS[type(node.op)](_walk(node.left), _walk(node.right))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = _walk(node.operand)
        value = -operand if isinstance(node.op, ast.USub) else operand
    else:
        raise ValueError(f"not arithmetic: {ast.dump(node)[:80]}")
    if abs(value) > MAX_MAGNITUDE:
        raise ValueError("too large")
    return value


def _format(value: float) -> str:
    if value.is_integer():
        return str(int(value))
    return f"{value:.6f}".rstrip("0").rstrip(".")
