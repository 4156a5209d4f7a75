"""Multiple-choice verifier: find the letter a model finally committed to in free text ("The
answer is (B)", "**C**", "Answer: d", "(A) ... wait, actually C", or the text of a choice) and
compare it with the reference letter."""

from __future__ import annotations

import re
import string
from functools import lru_cache
from typing import Any

from conductor.domain.errors import VerifierError
from conductor.domain.problem import Problem
from reward_pipeline.verifiers.base import ANSWER_IS_RE, Verdict, extract_boxed

__all__ = ["MultipleChoiceVerifier", "extract_choice", "reference_letter"]

_ALL_LETTERS = string.ascii_uppercase[:10]  # A-J covers MMLU (4) and MMLU-Pro (10)
# A mention followed by "is wrong" / preceded by "not" is a rejection, not a choice.
_REJECTED_AFTER = re.compile(
    r"^[\)\]\*\"'`]*\s*(?:is|was|seems|looks|would\s+be)\s+(?:not|wrong|incorrect|false|unlikely|eliminated|ruled\s+out)"
    r"|^[\)\]\*\"'`]*\s*(?:isn't|is\s+out|can\s+be\s+(?:eliminated|ruled\s+out))",
    re.IGNORECASE,
)
_REJECTED_BEFORE = re.compile(r"(?:\bnot|n't|\bthan|\beliminate|\brule\s+out|\bexcept|\bexclude)\s*(?:option\s+|choice\s+)?[\(\[\*\"'`]*\s*$",
                              re.IGNORECASE)  # fmt: skip
# After a lowercase letter we need punctuation or the end: "answer: d." yes, "answer is a bit" no.
_LOWER_OK_AFTER = re.compile(r"^(?:[\)\]\.:,;!?*\"'`]|\s*$|\s*\n)")


@lru_cache(maxsize=16)
def _patterns(letters: str) -> list[tuple[int, str, re.Pattern[str]]]:
    up, low = letters, letters.lower()
    tok = rf"[\(\[\*\"'`]*\s*(?<![\w'])(?P<L>[{up}{low}])(?![\w'])"
    tok_upper = rf"(?P<L>[{up}])(?![\w'])"
    verb = r"(?:is|:|=|would\s+be|should\s+be|must\s+be|will\s+be|is\s+option|is\s+choice)"
    commit = rf"(?:(?:final|correct|right|best|true)\s+)?answer\s*{verb}?\s*[:\-–]?\s*(?:option|choice|letter)?\s*"
    commit_opt = (
        rf"(?:final|correct|right|best|true)\s+(?:option|choice)\s*{verb}\s*[:\-–]?\s*(?:option|choice|letter)?\s*"
    )
    verdict = r"\s*[\)\]\*\"'`]*\s*(?:is|would\s+be|must\s+be)\s+(?:the\s+)?(?:correct|right|best|answer|true)"
    pick = r"\b(?:choose|chose|pick|select|go\s+with|going\s+with|i'?d\s+say|i\s+say|answer\s+with)\s*(?:option|choice|answer)?\s*"
    change = r"\b(?:actually|instead|rather|correction|on\s+second\s+thought)\s*[,:]?\s*(?:it'?s\s+|it\s+is\s+|option\s+|choice\s+)?"
    rx = [
        # tier 0: the whole reply is a letter
        (0, "bare letter", rf"^\s*[\(\[\*\"'`]*\s*(?P<L>[{up}{low}])\s*[\)\]\.\*\"'`]*\s*$"),
        # tier 1: explicit commitments
        (1, "boxed", rf"\\boxed\s*\{{\s*(?:\\text(?:bf)?\s*\{{)?\s*\(?\s*(?P<L>[{up}{low}])\s*\)?\s*\}}"),
        (1, "answer phrase", rf"\b{commit}{tok}"),
        (1, "answer phrase", rf"\b{commit_opt}{tok}"),
        (1, "declared correct", rf"(?:\b(?:option|choice)\s+)?{tok}(?={verdict})"),
        (1, "choose phrase", rf"{pick}{tok}"),
        (1, "change of mind", rf"{change}{tok}"),
        # tier 2: formatting that marks a letter
        (2, "bold", rf"\*\*\s*[\(\[]?(?P<L>[{up}{low}])[\)\]\.:]?(?:\s[^*\n]{{0,120}})?\*\*"),
        (2, "parenthesised", rf"[\(\[](?P<L>[{up}])[\)\]]"),
        (2, "line start", rf"(?m)^\s*(?P<L>[{up}])\s*[\)\.:](?:\s|$)"),
        (2, "option", rf"\b(?:option|choice)\s+{tok}"),
        # tier 3: any standalone capital letter
        (3, "letter", rf"(?<![\w'\-]){tok_upper}"),
    ]
    return [(tier, how, re.compile(p, re.IGNORECASE if tier == 1 or how == "option" else 0)) for tier, how, p in rx]


def _norm(text: str) -> str:
    text = re.sub(r"[*_`$\\]", "", text.lower())
    return re.sub(r"\s+", " ", text).strip(" .,:;!?\"'()[]")


def _accepted(text: str, m: re.Match[str], tier: int, how: str) -> bool:
    letter = m["L"]
    after = text[m.end("L") :]
    if letter.islower() and tier > 0 and not _LOWER_OK_AFTER.match(after):
        return False
    if _REJECTED_AFTER.match(after) or _REJECTED_BEFORE.search(text[max(0, m.start("L") - 30) : m.start("L")]):
        return False
    # "A cat ...", "I think ..." are words, not choices
    return not (how == "letter" and letter in "AI" and re.match(r"\s+[a-z]", after))


def _by_choice_text(text: str, choices: list[str], letters: str) -> tuple[str, str] | None:
    normed = [_norm(c) for c in choices]
    whole = _norm(text)
    for i, c in enumerate(normed):
        if c and whole == c:
            return letters[i], "choice text"
    said = [m["ans"] for m in ANSWER_IS_RE.finditer(text)] + extract_boxed(text)
    for phrase in reversed(said):
        p = _norm(phrase)
        hits = [i for i, c in enumerate(normed) if c and (p == c or p.startswith((c + " ", c + ",")))]
        if hits:
            best = max(hits, key=lambda i: len(normed[i]))
            return letters[best], "choice text after 'answer'"
    # Otherwise the choice whose text appears last (longest on ties: "not Paris" beats "Paris").
    lowered = re.sub(r"\s+", " ", re.sub(r"[*_`$\\]", "", text.lower()))
    best_pos, best_i = -1, None
    for i, c in enumerate(normed):
        if not c:
            continue
        for m in re.finditer(rf"(?<!\w){re.escape(c)}(?!\w)", lowered):
            if (m.end(), len(c)) > (best_pos, len(normed[best_i]) if best_i is not None else -1):
                best_pos, best_i = m.end(), i
    if best_i is not None:
        return letters[best_i], "choice text mentioned"
    return None


def _option_spans(text: str, choices: list[str], letters: str) -> list[tuple[int, int, int]]:
    """(start, end, choice index) of every place where a choice's full text is written.

    Only choices of three or more characters count; case, runs of whitespace and markdown/LaTeX
    markup (``*_`$\\``) inside the text are ignored.
    """
    spans: list[tuple[int, int, int]] = []
    for i, choice in enumerate(choices[: len(letters)]):
        words = _norm(choice).split()
        if len("".join(words)) < 3:
            continue
        gap = r"[\s*_`$\\]*"
        body = r"[\s*_`$\\]+".join(gap.join(re.escape(ch) for ch in w) for w in words)
        for m in re.finditer(rf"(?<!\w){body}(?!\w)", text, re.IGNORECASE):
            spans.append((m.start(), m.end(), i))
    return spans


def _inside_option(pos: int, spans: list[tuple[int, int, int]], text: str) -> tuple[int, int, int] | None:
    """The longest option-text span that contains the letter at ``pos`` or follows it as its
    label ("B) <the text of option D>": the full text is the stronger evidence), if any."""
    label = re.match(r"[\)\]\.:]?\s*", text[pos + 1 :])
    after = pos + 1 + (label.end() if label else 0)
    hits = [s for s in spans if s[0] <= pos < s[1] or s[0] == after]
    return max(hits, key=lambda s: s[1] - s[0]) if hits else None


def extract_choice(
    text: str, choices: list[str] | None = None, *, n_choices: int | None = None
) -> tuple[str, str] | None:
    """(letter, how it was found) for the final choice in ``text``, or None.

    A reply that is just a letter, or exactly one choice's text, is that choice. Otherwise the
    last explicit commitment wins ("answer is", "I choose", "actually", ``\\boxed{}``); then
    the last formatted letter (``**C**``, ``(B)``, a line starting "B)"); then a choice's text;
    then any standalone capital letter. Mentions that reject an option ("(D) is wrong",
    "not A") never count.
    """
    n = n_choices or (len(choices) if choices else 4)
    letters = _ALL_LETTERS[: max(1, min(n, len(_ALL_LETTERS)))]
    text = text or ""
    found: dict[int, tuple[int, str, str]] = {}
    for tier, how, rx in _patterns(letters):
        for m in rx.finditer(text):
            if not _accepted(text, m, tier, how):
                continue
            pos = m.start("L")
            if tier not in found or pos >= found[tier][0]:
                found[tier] = (pos, m["L"].upper(), how)
    if 0 in found:
        return found[0][1], found[0][2]
    if choices:
        # A reply that is exactly one choice's text means that choice, even if the text itself
        # contains letters in parentheses ("(A) and (C)").
        whole = _norm(text)
        for i, c in enumerate(choices[: len(letters)]):
            if whole and whole == _norm(c):
                return letters[i], "choice text"
    spans = _option_spans(text, choices, letters) if choices else []
    for tier in (1, 2):
        if tier in found:
            # A letter that is the start (or part) of a choice's full text ("the answer is: A =
            # cyclohexanecarbaldehyde, B = TsOH") names that choice, not the letter's option.
            span = _inside_option(found[tier][0], spans, text)
            if span is not None:
                return letters[span[2]], "choice text"
            return found[tier][1], found[tier][2]
    if choices:
        hit = _by_choice_text(text, choices, letters)
        if hit:
            return hit
    if 3 in found:
        span = _inside_option(found[3][0], spans, text)
        if span is not None:
            return letters[span[2]], "choice text"
        return found[3][1], found[3][2]
    return None


def reference_letter(problem: Problem) -> str:
    """The reference as a letter: "B", "(b)", "b." or the exact text of one of the choices."""
    ans = (problem.answer or "").strip()
    m = re.fullmatch(r"\(?([A-Ja-j])\)?\.?", ans)
    if m:
        return m.group(1).upper()
    if problem.choices:
        for i, c in enumerate(problem.choices):
            if _norm(c) == _norm(ans):
                return _ALL_LETTERS[i]
    raise VerifierError(f"problem {problem.id or '?'} has no usable multiple-choice reference: {problem.answer!r}")


class MultipleChoiceVerifier:
    """Correct when the letter the answer commits to equals the reference letter."""

    name = "mc"

    def verify(self, answer: str, problem: Problem) -> Verdict:
        expected = reference_letter(problem)
        n = len(problem.choices) if problem.choices else max(4, _ALL_LETTERS.index(expected) + 1)
        details: dict[str, Any] = {"expected": expected}
        found = extract_choice(answer or "", problem.choices, n_choices=n)
        if found is None:
            return Verdict(False, self.name, f"no choice found in the answer, expected {expected}",
                           details | {"extracted": None})  # fmt: skip
        letter, how = found
        details |= {"extracted": letter, "found_by": how}
        if problem.choices and _ALL_LETTERS.index(letter) < len(problem.choices):
            details["extracted_text"] = problem.choices[_ALL_LETTERS.index(letter)]
        ok = letter == expected
        return Verdict(
            ok, self.name, f"chose {letter} ({how}), {'expected' if ok else 'but expected'} {expected}", details
        )
