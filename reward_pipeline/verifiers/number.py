"""Final-number verifier for GSM8K-style problems: pull the final number out of free text and
compare it exactly with the reference (``1,234`` == ``1234``, ``$18.`` == ``18``, ``42.0`` == ``42``)."""

from __future__ import annotations

import re
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


_SENTENCE_RE = re.compile(r"(?<!\d)[.!?](?:\s|$)|[.!?](?=\s+[A-Z])|\n")


def _numbers(text: str) -> list[tuple[int, str, Fraction]]:
    """(position, text, value) of every number, where "\\frac{a}{b}" counts as one number."""
    fracs = [(m.start(), m.end(), m.group(0)) for m in FRAC_ANY_RE.finditer(text)]
    items = [(start, raw) for start, _, raw in fracs]
    items += [
        (m.start(), m.group(0)) for m in NUMBER_RE.finditer(text) if not any(s <= m.start() < e for s, e, _ in fracs)
    ]
    found = []
    for pos, raw in sorted(items):
        value = parse_number(raw)
        if value is not None:
            found.append((pos, raw.strip(), value))
    return found


def _phrase_number(phrase: str) -> tuple[Fraction, str] | None:
    """The number an "answer is ..." phrase commits to: its first number, unless the sentence
    works the answer out ("16 - 3 - 4 = 9 eggs at $2, so 9 * 2 = $18"): then the last result."""
    sentence = _SENTENCE_RE.split(phrase, maxsplit=1)[0] or phrase
    if "=" in sentence:
        after = _numbers(sentence[sentence.rindex("=") + 1 :])
        if after:
            return after[0][2], after[0][1]
    nums = _numbers(sentence) or _numbers(phrase)
    return (nums[0][2], nums[0][1]) if nums else None


_RESTATED_RE = re.compile(r"\b(?:the|those|these|her|his|their|its|all)\s+\$?$", re.IGNORECASE)


def _question_numbers(question: str | None) -> set[Fraction]:
    return {abs(value) for _, _, value in _numbers(question or "")}


def extract_final_number(text: str, question: str | None = None) -> tuple[Fraction, str, str] | None:
    """(value, matched text, where it was found) for the final number a model committed to.

    Looks, in order, at the last ``#### X``, the last ``\\boxed{X}``, the last "answer is X" /
    "Answer: X" (the result of a worked sentence: "= 9 ... = $18" gives 18), and finally the last
    number anywhere in the text, skipping numbers the worker restates from ``question`` ("so she
    makes $18 a day from her 16 eggs" gives 18) unless every number is one.
    """
    for where, candidates in (
        ("####", [m["ans"] for m in HASH_RE.finditer(text)]),
        ("boxed", extract_boxed(text)),
    ):
        for cand in reversed(candidates):
            value = parse_number(cand)
            if value is not None:
                return value, cand.strip()[:80], where
    for m in reversed(list(ANSWER_IS_RE.finditer(text))):
        said = _phrase_number(m["ans"])
        if said is not None:
            return said[0], said[1][:80], "answer is"
    # No anchor: the last number, less the ones that restate a known quantity: numbers of the
    # question, and numbers after a determiner ("from the 16 eggs she started with").
    numbers = _numbers(text)
    given = _question_numbers(question)
    named = [n for n in numbers if not _RESTATED_RE.search(text[max(0, n[0] - 8) : n[0]])]
    fresh = [n for n in named if abs(n[2]) not in given]  # abs: "25 - 2" reads as 25 and -2
    pool = fresh or named or numbers
    if not pool:
        return None
    _, raw, value = pool[-1]
    return value, raw, "last number" if pool is numbers or len(pool) == len(numbers) else "last new number"


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
        found = extract_final_number(answer or "", problem.question)
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
