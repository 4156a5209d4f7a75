"""The choice of verifier for a problem: `verifier_for(problem, judge=...)`."""

from __future__ import annotations

import re

from conductor.domain.problem import Problem
from reward_pipeline.verifiers.base import Verifier, is_plain_number
from reward_pipeline.verifiers.code_exec import CodeVerifier
from reward_pipeline.verifiers.math_equiv import MathVerifier
from reward_pipeline.verifiers.mc import MultipleChoiceVerifier
from reward_pipeline.verifiers.number import NumberVerifier
from reward_pipeline.verifiers.text import TextVerifier

__all__ = ["verifier_for"]

_LETTER_RE = re.compile(r"^\s*\(?([A-Ja-j])\)?\s*\.?\s*$")


def _is_letter(text: str | None) -> bool:
    return bool(text and _LETTER_RE.match(text))


def _source(problem: Problem) -> str:
    meta = problem.metadata or {}
    return " ".join(str(meta.get(k, "")) for k in ("source", "dataset", "benchmark")).lower()


def verifier_for(problem: Problem, *, judge: Verifier | None = None) -> Verifier | None:
    """The verifier that can check answers to ``problem``, or None if nothing can.

    code (tests present) -> code; mc (choices, or a bare letter answer) -> mc; math with a
    plain-number reference or a GSM8K source -> number; other math (or an untyped LaTeX
    answer) -> math; text with a reference -> text (normalised short-answer match), unless it also
    has a rubric and a ``judge`` is given; a rubric -> ``judge`` if given.
    """
    kind = problem.kind
    if problem.tests and kind in (None, "code"):
        return CodeVerifier()
    if kind == "code":
        return None
    if problem.answer and (kind == "mc" or (kind is None and (problem.choices or _is_letter(problem.answer)))):
        return MultipleChoiceVerifier()
    if problem.answer and kind in (None, "math"):
        if "gsm8k" in _source(problem) or is_plain_number(problem.answer) or "####" in problem.answer:
            return NumberVerifier()
        return MathVerifier()
    if kind == "text" and problem.answer and not (problem.rubric and judge is not None):
        return TextVerifier()
    if judge is not None and problem.rubric:
        return judge
    return None
