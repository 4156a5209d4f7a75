"""The evaluation gate: a candidate runs the same harness as the active policy, on a fixed dev set
that training never sees, through the same queue; it is promoted only if parse rate and accuracy
are not worse beyond their 95% intervals and its tokens per question stay within a margin."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from conductor.app.service import JobSpec
from conductor.config.pool import Pool
from conductor.domain.problem import Problem
from reward_pipeline.evaluation.baselines import parse_method
from reward_pipeline.evaluation.report import wilson_interval
from reward_pipeline.training.rollouts import RolloutBatch, Rollouts


@dataclass(frozen=True)
class GateConfig:
    z: float = 1.96  #: 95% two-sided
    token_margin: float = 0.25  #: candidate may spend at most 25% more tokens per question


@dataclass(frozen=True)
class PolicyEval:
    version: str
    n: int
    plans: int
    parsed: int
    correct: int
    tokens_per_question: float

    @property
    def parse_rate(self) -> float:
        return self.parsed / self.plans if self.plans else 0.0

    @property
    def accuracy(self) -> float:
        return self.correct / self.n if self.n else 0.0

    @classmethod
    def from_rollouts(cls, version: str, batch: RolloutBatch) -> PolicyEval:
        """`batch`: one job of one sample per dev problem, all run under the policy `version`."""
        n = len(batch.job_ids)
        return cls(
            version=version,
            n=n,
            plans=batch.plan_rounds,
            parsed=batch.parsed_rounds,
            correct=batch.correct_chains,
            tokens_per_question=batch.tokens / max(1, n),
        )

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "parse_rate": round(self.parse_rate, 4), "accuracy": round(self.accuracy, 4)}


def evaluate(rollouts: Rollouts, version: str, problems: Sequence[Problem], *, tag: str) -> PolicyEval:
    """Run `problems` once each under the policy the rollouts' gateway serves now."""
    return PolicyEval.from_rollouts(version, rollouts.run(problems, samples=1, options={"gate": tag}))


def not_worse(cand: tuple[int, int], base: tuple[int, int], z: float) -> tuple[bool, dict[str, float]]:
    """Is the candidate's rate not worse beyond a 95% interval on the difference (Wald, both samples)?"""
    (k1, n1), (k0, n0) = cand, base
    p1, p0 = (k1 / n1 if n1 else 0.0), (k0 / n0 if n0 else 0.0)
    se = math.sqrt(p1 * (1 - p1) / max(1, n1) + p0 * (1 - p0) / max(1, n0))
    diff = p1 - p0
    upper = diff + z * se
    # With both rates at 0 or 1 the standard error is 0: then any drop at all counts as worse.
    return upper >= 0 if se > 0 else diff >= 0, {"diff": round(diff, 4), "ci_upper": round(upper, 4)}


def decide(candidate: PolicyEval, active: PolicyEval, config: GateConfig = GateConfig()) -> dict[str, Any]:
    parse_ok, parse = not_worse((candidate.parsed, candidate.plans), (active.parsed, active.plans), config.z)
    acc_ok, acc = not_worse((candidate.correct, candidate.n), (active.correct, active.n), config.z)
    limit = active.tokens_per_question * (1 + config.token_margin)
    tokens_ok = candidate.tokens_per_question <= limit or active.tokens_per_question == 0
    reasons = [
        *([] if parse_ok else [f"parse rate worse: {candidate.parse_rate:.2f} vs {active.parse_rate:.2f}"]),
        *([] if acc_ok else [f"accuracy worse: {candidate.accuracy:.2f} vs {active.accuracy:.2f}"]),
        *([] if tokens_ok else [f"tokens/question {candidate.tokens_per_question:.0f} > {limit:.0f}"]),
    ]
    return {
        "passed": not reasons,
        "reasons": reasons,
        "candidate": candidate.as_dict(),
        "active": active.as_dict(),
        "parse_rate": parse,
        "accuracy": acc,
        "token_limit": round(limit, 1),
        "config": asdict(config),
    }


def evaluate_workers(rollouts: Rollouts, pool: Pool, problems: Sequence[Problem], *, tag: str) -> list[dict[str, Any]]:
    """Each model worker of ``pool`` alone on ``problems``, one sample each, as ``conductor eval``'s
    ``single:WORKER`` runs it (same queue, verifiers and rewards): the line a Conductor has to beat,
    with its 95% Wilson interval."""
    out = []
    for worker in (w for w in pool.workers if not w.is_tool):
        method = parse_method(f"single:{worker.name}", pool)
        jobs = []
        for problem in problems:
            args = method.job_args(problem)
            jobs.append((problem, JobSpec(samples=args["samples"], options={**args["options"], "gate": tag})))
        result = PolicyEval.from_rollouts(method.label, rollouts.run_jobs(jobs))
        low, high = wilson_interval(result.correct, result.n)
        out.append({**result.as_dict(), "method": method.label, "ci_low": round(low, 4), "ci_high": round(high, 4)})
    return out
