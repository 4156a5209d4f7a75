"""The shared shape of every verifier: the `Verdict` it returns, the `Verifier` protocol and
answer-extraction helpers for free text. Concrete verifiers import this module; it imports none
of them (the choice of verifier for a problem lives in `routing`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any, Protocol, runtime_checkable

from conductor.domain.problem import Problem

__all__ = [
    "Verdict",
    "Verifier",
    "bare_math_candidates",
    "extract_boxed",
    "extract_final_answer",
    "is_plain_number",
    "last_number",
    "parse_number",
]


@dataclass(frozen=True)
class Verdict:
    """Whether an answer is right, which verifier said so, and the evidence."""

    correct: bool
    verifier: str  # "math", "number", "mc", "code", "text", "judge", "feedback"
    reason: str  # one human sentence, e.g. "extracted 42, expected 42"
    details: dict[str, Any] = field(default_factory=dict)
    score: float | None = None  # graded score in [0, 1] where the verifier has one

    def as_dict(self) -> dict[str, Any]:
        return {
            "correct": self.correct,
            "verifier": self.verifier,
            "reason": self.reason,
            "details": self.details,
            "score": self.score,
        }


@runtime_checkable
class Verifier(Protocol):
    name: str

    def verify(self, answer: str, problem: Problem) -> Verdict: ...


# --------------------------------------------------------------------------- extraction helpers

_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")


def extract_boxed(text: str) -> list[str]:
    """Contents of every ``\\boxed{...}`` / ``\\fbox{...}`` in order, nested braces respected.

    An unclosed box (truncated output) is ignored.
    """
    found: list[str] = []
    for m in _BOXED_RE.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            c = text[i]
            if c == "\\" and i + 1 < len(text) and text[i + 1] in "{}":
                i += 2  # \{ and \} are literal braces, not grouping
                continue
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
            i += 1
        if depth == 0:
            found.append(text[m.end() : i - 1].strip())
    return found


# Thousands groups only when every group has exactly three digits, so "1,2,3" stays a list.
_NUM_BODY = r"(?:\d{1,3}(?:,\d{3})+(?![\d])|\d+)(?:\.\d+)?|\.\d+"
NUMBER_RE = re.compile(
    r"(?<![\w.])(?P<sign>[-−–]?)\s?(?:\\?\$\s?)?(?P<sign2>[-−]?)(?P<num>"
    + _NUM_BODY
    + r")(?:\s?/\s?(?P<den>\d+)(?![\d.]))?"
)
_FRAC_RE = re.compile(r"(?P<sign>-?)\\[dt]?frac\s*\{\s*(?P<a>-?[\d.,]+)\s*\}\s*\{\s*(?P<b>-?[\d.,]+)\s*\}")
_FRAC_SHORT_RE = re.compile(r"(?P<sign>-?)\\[dt]?frac\s*(?P<a>\d)(?P<b>\d)")
FRAC_ANY_RE = re.compile(r"-?\\[dt]?frac\s*(?:\{[^{}]*\}\s*\{[^{}]*\}|\d\d)")
HASH_RE = re.compile(r"####\s*(?P<ans>[^\n]+)")
ANSWER_IS_RE = re.compile(
    r"(?:final\s+answer|answer)\s*(?:is|:|=|would\s+be|should\s+be|will\s+be)\s*:?\s*(?P<ans>[^\n]{1,200})",
    re.IGNORECASE,
)


def _to_fraction(num: str) -> Fraction | None:
    try:
        return Fraction(Decimal(num.replace(",", "")))
    except (InvalidOperation, ValueError, ZeroDivisionError):
        return None


def parse_number(text: str) -> Fraction | None:
    """The first number in ``text`` as an exact Fraction ("$1,234.50" -> 2469/2, "\\frac{3}{4}").

    Returns None when ``text`` holds no number.
    """
    text = text.strip()
    best: tuple[int, Fraction] | None = None
    for rx in (_FRAC_RE, _FRAC_SHORT_RE):
        m = rx.search(text)
        if m:
            a, b = _to_fraction(m["a"]), _to_fraction(m["b"])
            if a is not None and b:
                value = a / b * (-1 if m["sign"] else 1)
                if best is None or m.start() < best[0]:
                    best = (m.start(), value)
    m = NUMBER_RE.search(text)
    if m and (best is None or m.start() < best[0]):
        number = _to_fraction(m["num"])
        if number is not None:
            value = number
            if m["den"]:
                den = int(m["den"])
                if den == 0:
                    return None
                value /= den
            if m["sign"] or m["sign2"]:
                value = -value
            best = (m.start(), value)
    return best[1] if best else None


def last_number(text: str) -> str | None:
    """The text of the last number in ``text`` (sign, commas and fraction bar kept)."""
    matches = list(NUMBER_RE.finditer(text))
    return matches[-1].group(0).strip() if matches else None


def is_plain_number(text: str | None) -> bool:
    """True for references like "42", "-3.5", "1,234", "$18", "42." (not LaTeX, not words)."""
    if not text:
        return False
    s = text.strip().replace("\\$", "").replace("$", "").strip().rstrip(".").strip()
    return bool(re.fullmatch(r"[-−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?", s))


def extract_final_answer(text: str) -> str | None:
    """Best guess at the final answer in a model's free text.

    Priority: the last ``\\boxed{...}``; then the last ``#### X``; then the last "The (final)
    answer is X" / "Answer: X" (up to the end of the line, trailing period dropped); then the
    last number anywhere. None if none of these appear.
    """
    boxed = extract_boxed(text)
    if boxed:
        return boxed[-1]
    hashes = HASH_RE.findall(text)
    if hashes:
        return hashes[-1].strip()
    said = [m["ans"] for m in ANSWER_IS_RE.finditer(text)]
    if said:
        ans = said[-1].strip().strip("*").strip()
        ans = re.sub(r"\.\s*$", "", ans)
        if ans:
            return ans
    return last_number(text)


# A whitespace token that belongs to a formula: digits, operators, braces, a LaTeX command, or a
# single letter (a variable). Plain words ("because", "dollars") end a formula.
_MATH_TOKEN_RE = re.compile(r"[\w\\{}()\[\]^+\-*/=<>|!'.,:;$−]+")
_SENTENCE_END_RE = re.compile(r"[.;,:!?)\]]+$")


def _is_math_token(tok: str) -> bool:
    m = _MATH_TOKEN_RE.fullmatch(tok)
    return bool(m) and bool(re.search(r"[\d\\]", tok) or re.fullmatch(r"[$(]*[A-Za-z][$).,]*|[-+*/=<>^−]", tok))


def _clean_formula(tokens: list[str]) -> str | None:
    formula = " ".join(tokens).strip()
    formula = re.sub(r"\$+", "", formula).strip()
    formula = _SENTENCE_END_RE.sub("", formula).strip() if not formula.endswith(("}", ")")) else formula
    formula = re.sub(r"\\[dt]frac", r"\\frac", formula)
    if not formula or not re.search(r"\d|\\[A-Za-z]", formula):
        return None
    # Unbalanced braces mean the formula was cut mid-way: not a usable answer.
    return formula if formula.count("{") == formula.count("}") else None


def bare_math_candidates(text: str) -> tuple[list[str], list[str]]:
    """Formulas written without ``$`` delimiters, as (anchored, loose) lists, last first.

    anchored: the formula right after each "the answer is" / "Answer:" ("the answer is
    \\dfrac{7}{4}." -> "\\frac{7}{4}"); loose: the last run of formula tokens in the text
    that holds a LaTeX command ("so x = \\tfrac{3}{2} is it" -> "x = \\frac{3}{2}").
    ``\\dfrac`` and ``\\tfrac`` become ``\\frac``; trailing sentence punctuation is dropped.
    """
    anchored: list[str] = []
    for m in reversed(list(ANSWER_IS_RE.finditer(text))):
        tokens: list[str] = []
        for tok in m["ans"].split():
            if not _is_math_token(tok.strip("*")):
                break
            tokens.append(tok.strip("*"))
            if tok.endswith((".", ";", "!", "?")):
                break  # end of the sentence
        formula = _clean_formula(tokens)
        if formula and formula not in anchored:
            anchored.append(formula)
    loose: list[str] = []
    run: list[str] = []
    for tok in [*text.split(), "."]:
        if _is_math_token(tok.strip("*")) and tok != ".":
            run.append(tok.strip("*"))
            continue
        if run and any(re.search(r"\\[A-Za-z]", t) for t in run):
            formula = _clean_formula(run)
            if formula:
                loose.insert(0, formula)
        run = []
    return anchored, loose
