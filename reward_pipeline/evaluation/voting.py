"""Majority vote (best-of-n): the answer most samples agree on, as the verifiers read them."""

from __future__ import annotations

from collections import Counter

from conductor.domain.problem import Problem
from conductor.store.models import Reward
from reward_pipeline.verifiers import extract_code


def _vote_key(reward: Reward | None, answer: str, problem: Problem) -> str | None:
    if problem.tests or problem.kind == "code":
        code = extract_code(answer, problem.entry_point)
        return "\n".join(line.rstrip() for line in code.strip().splitlines() if line.strip()) or None
    evidence = (reward.details or {}).get("evidence", {}) if reward is not None else {}
    extracted = evidence.get("extracted")
    if extracted is None:
        return None
    return " ".join(str(extracted).split()).lower()


def majority_vote(samples: list[tuple[int, str, Reward | None]], problem: Problem) -> tuple[int, dict[str, int]]:
    """The index into `samples` ((sample index, answer, chain reward)) that wins the vote, and the tally.

    Votes are the verifier's extraction of each answer (final number, letter, math
    expression; normalised code for code problems); answers with nothing extracted do not
    vote. Ties go to the key first seen in sample order.
    """
    keys = [_vote_key(r, a, problem) for _, a, r in samples]
    tally = Counter(k for k in keys if k is not None)
    if not tally:
        return 0, {}
    best = max(tally.values())
    winner = next(k for k in keys if k is not None and tally[k] == best)
    return keys.index(winner), dict(tally)
