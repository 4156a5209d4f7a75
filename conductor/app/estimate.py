"""What a batch will cost before it runs: expected model calls, tokens and USD per problem and in
total, at an effort level, with the method stated.

Two methods, the first that applies:
- `recent-usage`: the mean per sample of the newest finished jobs at the same effort (at least
  `MIN_HISTORY`, at most `HISTORY` of them), USD as they were priced when they ran;
- `pool-upper-bound`: no such history: one Conductor call (plus one replan where replans are on) and
  `max_steps` worker calls per sample, every call using its model's full `max_tokens`, prompts measured
  as the real planning prompt and question at 4 characters per token, priced by the pool.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from conductor.config.pool import ModelSpec, Pool
from conductor.config.settings import Settings
from conductor.domain.effort import knob
from conductor.domain.problem import Problem
from conductor.store.models import Job

HISTORY = 200
MIN_HISTORY = 3
CHARS_PER_TOKEN = 4
SELF_HOSTED = ("local", "hosted_vllm", "tool")


def token_prices(spec: ModelSpec) -> tuple[float, float] | None:
    """USD per prompt and per completion token: the pool's price, else litellm's local cost map;
    0 for self-hosted models and tools; None when unknown."""
    if spec.price is not None:
        return spec.price.input_per_token, spec.price.output_per_token
    if spec.provider in SELF_HOSTED:
        return 0.0, 0.0
    import litellm

    info = litellm.model_cost.get(spec.model) or litellm.model_cost.get(spec.model.split("/", 1)[-1]) or {}
    inp, out = info.get("input_cost_per_token"), info.get("output_cost_per_token")
    return None if inp is None or out is None else (float(inp), float(out))


@dataclass
class Cost:
    model_calls: float = 0.0
    prompt_tokens: float = 0.0
    completion_tokens: float = 0.0
    usd: float = 0.0

    def add(self, calls: float, prompt: float, completion: float, prices: tuple[float, float] | None) -> None:
        self.model_calls += calls
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        if prices is not None:
            self.usd += prompt * prices[0] + completion * prices[1]

    def scaled(self, k: float) -> Cost:
        return Cost(self.model_calls * k, self.prompt_tokens * k, self.completion_tokens * k, self.usd * k)

    def as_dict(self) -> dict[str, Any]:
        return {
            "model_calls": round(self.model_calls, 2),
            "prompt_tokens": round(self.prompt_tokens),
            "completion_tokens": round(self.completion_tokens),
            "total_tokens": round(self.prompt_tokens + self.completion_tokens),
            "usd": round(self.usd, 6),
        }


def estimate(
    sessions: sessionmaker[Session],
    pool: Pool,
    settings: Settings,
    problems: Iterable[Problem],
    *,
    effort: str | None = None,
    samples: int | None = None,
) -> dict[str, Any]:
    k = knob(effort, samples)  # an unknown effort fails here, before anything is read
    g = k.samples or settings.samples
    questions = [p.question for p in problems]
    level = effort or "medium"
    history = _recent(sessions, level)
    unknown: list[str] = []
    if len(history) >= MIN_HISTORY:
        per_sample = Cost()
        for job in history:
            per_sample.add(
                job.model_calls / job.samples,
                job.prompt_tokens / job.samples,
                job.completion_tokens / job.samples,
                None,
            )
            per_sample.usd += job.cost_usd / job.samples
        per_sample = per_sample.scaled(1 / len(history))
        total = per_sample.scaled(g * len(questions))
        method = f"recent-usage: mean per sample of the newest {len(history)} finished jobs at effort {level}"
    else:
        cap = pool.step_cap(settings.max_steps)
        max_steps = min(int(k.options.get("max_steps", cap)), cap)
        replans = 1 if settings.recursion and k.options.get("recursion", True) else 0
        total = Cost()
        for q in questions:
            total = _add(total, _upper_bound(pool, q, max_steps, replans, unknown).scaled(g))
        method = (
            f"pool-upper-bound: no {MIN_HISTORY} finished jobs at effort {level} yet; per sample "
            f"{1 + replans} Conductor call(s) and {max_steps} worker call(s) at full max_tokens, priced by the pool"
        )
    n = max(len(questions), 1)
    return {
        "object": "estimate",
        "method": method,
        "effort": level,
        "samples": g,
        "problems": len(questions),
        "per_problem": total.scaled(1 / n).as_dict(),
        "total": total.as_dict(),
        "unpriced_models": sorted(set(unknown)),
    }


def _add(a: Cost, b: Cost) -> Cost:
    return Cost(
        a.model_calls + b.model_calls,
        a.prompt_tokens + b.prompt_tokens,
        a.completion_tokens + b.completion_tokens,
        a.usd + b.usd,
    )


def _recent(sessions: sessionmaker[Session], effort: str) -> list[Job]:
    with sessions() as s:
        rows = s.scalars(
            select(Job)
            .where(Job.status.in_(("done", "budget_exceeded")), Job.model_calls > 0)
            .order_by(Job.finished_at.desc())
            .limit(HISTORY)
        ).all()
        # Jobs before the knob existed, and requests without one, ran at medium.
        return [
            j for j in rows if str((j.options or {}).get("effort", "medium")) == effort and not j.options.get("gate")
        ]


def _upper_bound(pool: Pool, question: str, max_steps: int, replans: int, unknown: list[str]) -> Cost:
    cost = Cost()
    prompt = pool.conductor.plan_messages(question, pool.cards(), max_steps=max_steps)
    plan_tokens = sum(len(str(m.get("content", ""))) for m in prompt) / CHARS_PER_TOKEN
    prices = token_prices(pool.conductor)
    if prices is None:
        unknown.append(pool.conductor.model)
    cost.add(1 + replans, plan_tokens * (1 + replans), pool.conductor.max_tokens * (1 + replans), prices)
    # Workers: the dearest worker for every step, each seeing the question and every earlier answer.
    priced = [(w, token_prices(w)) for w in pool.workers]
    unknown.extend(w.model for w, p in priced if p is None)
    worker, wprices = max(priced, key=lambda wp: (wp[1] or (0.0, 0.0))[1] * wp[0].max_tokens)
    q_tokens = len(question) / CHARS_PER_TOKEN
    for i in range(max_steps):
        cost.add(1, q_tokens + i * worker.max_tokens, worker.max_tokens, wprices)
    return cost
