"""Final-number verifier for GSM8K-style problems: pull the final number out of free text and
compare it exactly with the reference (``1,234`` == ``1234``, ``$18.`` == ``18``, ``42.0`` == ``42``)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from conductor.domain.errors import VerifierError
from conductor.domain.problem import Problem
from reward_pipeline.verifiers.base import (
    ANSWER_IS_RE,
    FRAC_ANY_RE,
    HASH_RE,
    NUMBER_RE,
    Verdict,
    extract_boxed,
    parse_number,
)

__all__ = ["NumberVerifier", "extract_final_number", "reference_number"]


def _fmt(x: Fraction) -> str:
    if x.denominator == 1:
        return str(x.numerator)
    as_float = float(x)
    return f"{as_float:g}" if Fraction(repr(as_float)) == x else f"{x.numerator}/{x.denominator}"


def extract_final_number(text: str) -> tuple[Fraction, str, str] | None:
    """(value, matched text, where it was found) for the final number a model committed to.

    Looks, in order, at the last ``#### X``, the last ``\\boxed{X}``, the last "answer is X" /
    "Answer: X", and finally the last number anywhere in the text.
    """
    for where, candidates in (
        ("####", [m["ans"] for m in HASH_RE.finditer(text)]),
        ("boxed", extract_boxed(text)),
        ("answer is", [m["ans"] for m in ANSWER_IS_RE.finditer(text)]),
    ):
        for cand in reversed(candidates):
            value = parse_number(cand)
            if value is not None:
                return value, cand.strip()[:80], where
    # No anchor: the last number, where "\frac{a}{b}" counts as one number rather than two.
    fracs = [(m.start(), m.end(), m.group(0)) for m in FRAC_ANY_RE.finditer(text)]
    items = [(start, raw) for start, _, raw in fracs]
    items += [
        (m.start(), m.group(0)) for m in NUMBER_RE.finditer(text) if not any(s <= m.start() < e for s, e, _ in fracs)
    ]
    for _, raw in sorted(items, reverse=True):
        value = parse_number(raw)
        if value is not None:
            return value, raw.strip(), "last number"
    return None


def reference_number(answer: str) -> Fraction | None:
    """The reference's number: after ``#### `` for a full GSM8K solution, else the number itself."""
    hashes = HASH_RE.findall(answer)
    return parse_number(hashes[-1] if hashes else answer)


class NumberVerifier:
    """Correct when the final number in the answer equals the reference number exactly."""

    name = "number"

    def __init__(self, *, rel_tol: float = 1e-9) -> None:
        # Exact rational comparison first; rel_tol only forgives float noise like 0.30000000000000004.
        self.rel_tol = rel_tol

    def verify(self, answer: str, problem: Problem) -> Verdict:
        expected = reference_number(problem.answer or "")
        if expected is None:
            raise VerifierError(f"problem {problem.id or '?'} has no numeric reference answer: {problem.answer!r}")
        details: dict[str, Any] = {"expected": _fmt(expected), "reference": problem.answer}
        found = extract_final_number(answer or "")
        if found is None:
            return Verdict(False, self.name, f"no number found in the answer, expected {_fmt(expected)}",
                           details | {"extracted": None})  # fmt: skip
        value, raw, where = found
        details |= {"extracted": _fmt(value), "extracted_text": raw, "found_by": where}
        equal = value == expected or (
            expected != 0 and abs(float(value - expected)) <= self.rel_tol * abs(float(expected))
        )
        verb = "expected" if equal else "but expected"
        return Verdict(equal, self.name, f"extracted {_fmt(value)}, {verb} {_fmt(expected)}", details)
