"""Plan-only probes: does a policy write a parseable workflow, and which workers does it pick?

Cheap (one Conductor call per question, no steps), so the shipped adapter's claim can be checked
in a test and the loop can report parse rates on benchmarks it never trains on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from conductor.domain.errors import PlanParseError
from conductor.domain.parser import parse_workflow
from conductor.domain.problem import Problem
from conductor.inference.gateway import Gateway


@dataclass
class ProbeResult:
    n: int = 0
    parsed: int = 0
    steps: Counter[int] = field(default_factory=Counter)
    workers: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    completion_tokens: int = 0

    @property
    def parse_rate(self) -> float:
        return self.parsed / self.n if self.n else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "parsed": self.parsed,
            "parse_rate": round(self.parse_rate, 4),
            "steps": dict(sorted(self.steps.items())),
            "workers": dict(sorted(self.workers.items())),
            "errors": dict(self.errors.most_common(5)),
            "completion_tokens_mean": round(self.completion_tokens / self.n, 1) if self.n else None,
        }


def first_plan(gateway: Gateway, problem: Problem, *, max_steps: int = 5) -> tuple[Any, int]:
    """One first-round plan for ``problem`` as production samples it (the pool's prompt style and the same
    grammar a production round gets): the workflow, or the parse error; and its completion tokens."""
    pool = gateway.pool
    cards = pool.cards()
    max_steps = pool.step_cap(max_steps)
    grammar = pool.conductor.plan_grammar(len(cards), max_steps=max_steps, replan=False)
    messages = pool.conductor.plan_messages(problem.question, cards, max_steps=max_steps)
    completion = gateway.call_conductor(messages, grammar=grammar)
    try:
        return parse_workflow(completion.text, pool_size=len(cards), max_steps=max_steps), completion.completion_tokens
    except PlanParseError as exc:
        return exc, completion.completion_tokens


def probe_plans(gateway: Gateway, problems: Sequence[Problem], *, max_steps: int = 5, threads: int = 8) -> ProbeResult:
    """First-round plans for `problems`, at most `max_steps` (lowered to the pool Conductor's own cap)."""

    def one(problem: Problem) -> tuple[Any, int]:
        return first_plan(gateway, problem, max_steps=max_steps)

    result = ProbeResult()
    with ThreadPoolExecutor(threads) as ex:
        for outcome, tokens in ex.map(one, problems):
            result.n += 1
            result.completion_tokens += tokens
            if isinstance(outcome, PlanParseError):
                result.errors[str(outcome).split(":")[0][:60]] += 1
                continue
            result.parsed += 1
            result.steps[len(outcome.steps)] += 1
            for step in outcome.steps:
                result.workers[step.worker] += 1
    return result
