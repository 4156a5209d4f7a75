"""Short-answer verifier for `kind: text` problems with a reference ("Paris", "George Washington"):
SQuAD's normalised exact match against the answer and its aliases.

Normalising (SQuAD's ``normalize_answer``): lowercase, drop punctuation, drop the articles a/an/the,
collapse whitespace; so "The Eiffel Tower." matches "eiffel tower". The references are
``problem.answer`` plus ``problem.metadata["aliases"]`` (a list of strings, as TriviaQA ships them).

A worker rarely answers with the bare reference, so the response is read as a few candidates, in order:
the last ``\\boxed{}`` / "Answer: X" / "The answer is X" phrase, the last non-empty line, the whole text.
A candidate is right when it equals a reference after normalising, or when it is short (at most
`MAX_CONTAINING_WORDS` words after normalising) and holds a reference as a whole run of words ("It is
Paris." holds "paris"). The word cap is the trade: a short sentence that names the answer is an answer,
while a long response that names it among others ("Paris, Lyon or Marseille, ...") is not credited for
listing. A short hedge ("not Paris") is still counted right: the cost of reading short sentences.
"""

from __future__ import annotations

import re
import string
from typing import Any

from conductor.domain.errors import VerifierError
from conductor.domain.problem import Problem
from reward_pipeline.verifiers.base import ANSWER_IS_RE, Verdict, extract_boxed

__all__ = ["MAX_CONTAINING_WORDS", "TextVerifier", "answer_candidates", "normalize_answer", "references"]

#: The longest (normalised, in words) candidate that is right by holding a reference rather than being one.
MAX_CONTAINING_WORDS = 8

_PUNCTUATION = str.maketrans("", "", string.punctuation + "“”‘’«»…–—")
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_ARTICLE_WORDS = ("a", "an", "the")


def normalize_answer(text: str, *, articles: bool = False) -> str:
    """SQuAD's normalisation: lowercase, no punctuation, no articles, single spaces. ``articles=True``
    keeps the articles, for a reference that is one ("a" is the first letter of "apple")."""
    lowered = text.lower().translate(_PUNCTUATION)
    return " ".join((lowered if articles else _ARTICLES.sub(" ", lowered)).split())


def _is_article(reference: str) -> bool:
    return bool(reference.strip()) and not normalize_answer(reference)


def references(problem: Problem) -> list[str]:
    """The answer and its aliases, normalised, without blanks or repeats."""
    aliases = problem.metadata.get("aliases") or []
    if isinstance(aliases, str) or not all(isinstance(a, str) for a in aliases):
        raise VerifierError(f"metadata aliases must be a list of strings, got {aliases!r}")
    out: list[str] = []
    for ref in [problem.answer or "", *aliases]:
        norm = normalize_answer(ref, articles=_is_article(ref))
        if norm and norm not in out:
            out.append(norm)
    return out


def answer_candidates(text: str) -> list[tuple[str, str]]:
    """(where, text) of what the response may commit to, most specific first."""
    found: list[tuple[str, str]] = []
    boxed = extract_boxed(text)
    if boxed:
        found.append(("boxed", boxed[-1]))
    said = [m["ans"] for m in ANSWER_IS_RE.finditer(text)]
    if said:
        found.append(("answer phrase", said[-1]))
    lines = [line for line in text.splitlines() if line.strip()]
    if lines:
        found.append(("last line", lines[-1]))
    found.append(("whole response", text))
    return found


def _holds(candidate: str, reference: str) -> bool:
    return f" {reference} " in f" {candidate} "


class TextVerifier:
    """Normalised exact match (or a short answer holding the reference) against the answer and aliases."""

    name = "text"

    def verify(self, answer: str, problem: Problem) -> Verdict:
        refs = references(problem)
        if not refs:
            raise VerifierError("text verifier needs a reference answer")
        details: dict[str, Any] = {"references": refs}
        for where, candidate in answer_candidates(answer):
            for ref in refs:
                # A reference that is an article is compared with the articles kept on both sides.
                norm = normalize_answer(candidate, articles=ref in _ARTICLE_WORDS)
                short = len(norm.split()) <= MAX_CONTAINING_WORDS
                if norm == ref or (short and _holds(norm, ref)):
                    how = "is" if norm == ref else "holds"
                    details |= {"extracted": norm, "from": where, "matched": ref}
                    return Verdict(True, self.name, f"the {where} {how} {ref!r}", details)
        details["extracted"] = normalize_answer(answer_candidates(answer)[0][1])
        return Verdict(False, self.name, f"no answer matching {refs[0]!r}", details)
