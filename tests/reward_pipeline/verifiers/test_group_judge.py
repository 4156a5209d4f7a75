"""The group judge on its own: prompt, shuffled order, score parsing, retries and recorded failures."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from reward_pipeline.verifiers.group_judge import (
    DEFAULT_RUBRIC,
    Candidate,
    GroupJudge,
    build_group_messages,
    parse_group_scores,
)
from tests.support.judge import judge_reply, shown_answers


@dataclass
class FakeReply:
    """What the gateway hands back (text, model, tokens, cost); here built from a scripted reply."""

    text: str
    model: str = "judge-model"
    prompt_tokens: int = 100
    completion_tokens: int = 20
    cost_usd: float = 0.001


CANDIDATES = [Candidate("Paris is the capital.", "worker 0: 'answer'"), Candidate("Rome.", ""), Candidate("Oslo", "")]


def by_content(messages: list[dict]) -> FakeReply:
    return FakeReply(judge_reply(messages, lambda a: 1.0 if "Paris" in a else 0.2).content)


def test_scores_come_back_in_the_callers_order_whatever_order_the_judge_saw() -> None:
    seen_orders = []
    for seed in range(6):
        verdict = GroupJudge(by_content, rng=random.Random(seed)).judge("Capital of France?", CANDIDATES)
        seen_orders.append(tuple(verdict.orders[-1]))
        assert verdict.ok and verdict.scores == [1.0, 0.2, 0.2]
    assert len(set(seen_orders)) > 1  # the order really is shuffled (and recorded)


def test_the_prompt_holds_the_question_rubric_version_every_answer_and_its_workflow() -> None:
    messages = build_group_messages("Capital of France?", CANDIDATES, [2, 0, 1], DEFAULT_RUBRIC)
    user = messages[1]["content"]
    assert "Capital of France?" in user and DEFAULT_RUBRIC.version in user
    assert all(c.split(":")[0] in user for c in DEFAULT_RUBRIC.criteria)
    assert shown_answers(messages) == {"A": "Oslo", "B": "Paris is the capital.", "C": "Rome."}
    assert "Workflow: worker 0: 'answer'" in user


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('A fine. B poor.\n{"A": 0.9, "B": 0.1}', [0.9, 0.1]),
        ('{"a": 1, "b": 0}', [1.0, 0.0]),
        ('draft {"A": 0.5}\nfinal {"A": 0.7, "B": 0.3}', [0.7, 0.3]),
        ('{"A": 0.9}', None),  # B missing
        ('{"A": 0.9, "B": 7}', None),  # out of range: not silently clipped
        ('{"A": 0.9, "B": true}', None),
        ("A is better than B.", None),
        ("", None),
    ],
)
def test_parse_group_scores(reply: str, expected: list[float] | None) -> None:
    assert parse_group_scores(reply, 2) == expected


def test_timeouts_rate_limits_and_garbage_are_retried_with_a_fresh_order() -> None:
    replies: list[object] = [TimeoutError("judge took too long"), RuntimeError("429 rate limited"), "no idea"]
    waits: list[float] = []

    def call(messages: list[dict]) -> FakeReply:
        if replies:
            r = replies.pop(0)
            if isinstance(r, Exception):
                raise r
            return FakeReply(str(r))
        return by_content(messages)

    verdict = GroupJudge(call, attempts=4, backoff_s=0.5, sleep=waits.append).judge("Capital?", CANDIDATES)
    assert verdict.ok and verdict.attempts == 4 and verdict.scores == [1.0, 0.2, 0.2]
    assert len(verdict.orders) == 4 and waits == [0.5, 1.0, 2.0]
    assert verdict.cost_usd == pytest.approx(0.002)  # the garbage reply was paid for too
    assert verdict.prompt_tokens == 200


def test_a_judge_that_never_answers_usably_is_a_recorded_failure_not_a_zero() -> None:
    verdict = GroupJudge(lambda m: FakeReply("Both are fine."), attempts=3, sleep=lambda s: None).judge(
        "Capital?", CANDIDATES
    )
    assert not verdict.ok and verdict.scores is None and verdict.attempts == 3
    assert verdict.error is not None and verdict.error.count("no JSON object") == 3
    assert verdict.replies == ["Both are fine."] * 3
