"""Rollouts through the production path: problems become jobs on the same queue, pipeline, gateway,
verifiers and store as real traffic; the loop waits for them and for their rewards."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select

from conductor.app.service import JobSpec, Service
from conductor.domain.problem import Problem
from conductor.store.models import Job, Reward, Round
from reward_pipeline.rewards import score_job


@dataclass
class RolloutBatch:
    job_ids: list[str] = field(default_factory=list)
    plan_rounds: int = 0
    parsed_rounds: int = 0
    chains: int = 0
    correct_chains: int = 0
    reward_sum: float = 0.0
    tokens: int = 0

    @property
    def parse_rate(self) -> float:
        return self.parsed_rounds / self.plan_rounds if self.plan_rounds else 0.0

    @property
    def reward_mean(self) -> float:
        return self.reward_sum / self.chains if self.chains else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "jobs": len(self.job_ids),
            "plan_rounds": self.plan_rounds,
            "parse_rate": round(self.parse_rate, 4),
            "chains": self.chains,
            "correct": self.correct_chains,
            "reward_mean": round(self.reward_mean, 4),
            "tokens": self.tokens,
        }


@dataclass
class Rollouts:
    service: Service
    timeout_s: float = 3600.0

    def run(self, problems: Sequence[Problem], *, samples: int, options: dict[str, Any]) -> RolloutBatch:
        return self.run_jobs([(p, JobSpec(samples=samples, options=dict(options))) for p in problems])

    def run_jobs(self, jobs: Sequence[tuple[Problem, JobSpec]]) -> RolloutBatch:
        """Each problem with its own spec (a fixed workflow, say), all submitted before waiting."""
        ids = [self.service.submit(problem, spec)[0] for problem, spec in jobs]
        self.service.wait(ids, timeout=self.timeout_s)
        for job_id in ids:  # idempotent: returns the rows the reward queue already wrote
            score_job(self.service.sessions, job_id)
        return self.summarise(ids)

    def summarise(self, ids: list[str]) -> RolloutBatch:
        out = RolloutBatch(job_ids=ids)
        with self.service.sessions() as s:
            plan_rounds = s.execute(
                select(Round.parse_status, func.count())
                .where(Round.job_id.in_(ids), Round.kind == "plan")
                .group_by(Round.parse_status)
            ).all()
            out.plan_rounds = sum(n for _, n in plan_rounds)
            out.parsed_rounds = sum(n for status, n in plan_rounds if status == "ok")
            chain_rewards = s.scalars(
                select(Reward).where(Reward.job_id.in_(ids), Reward.chain_id.is_not(None), Reward.source == "verifier")
            ).all()
            out.chains = len(chain_rewards)
            out.correct_chains = sum(1 for r in chain_rewards if r.correct)
            out.reward_sum = sum(r.value for r in chain_rewards)
            out.tokens = int(
                s.scalar(select(func.sum(Job.prompt_tokens + Job.completion_tokens)).where(Job.id.in_(ids))) or 0
            )
        return out
