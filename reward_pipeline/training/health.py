"""Training health: the numbers that say whether an off-policy GRPO update can be trusted.

Per optimizer step (from the loss's per-token tensors, across the step's micro-batches) and per
cycle, as TRL logs its ratio and zero-std statistics and verl its rollout-correction metrics:

* the importance weight w = exp(logp_proximal - logp_behaviour) before the cap: min / mean / max,
  and the share of tokens where the cap bit (`capped_fraction`);
* the effective sample size of those weights, normalised to (0, 1]: (sum w)^2 / (n * sum w^2).
  1 means the stored traces count fully; near 0, a few tokens carry the whole update;
* the share of tokens whose ratio the PPO clip cut (`clip_fraction`);
* KL(behaviour || current), k1 estimate on the behaviour policy's own samples;
* the staleness of the rows (promotions behind the active policy), and their reward by source;
* per cycle, the share of groups with no reward variance (they carry no signal and are dropped).

A staleness cap is enforced here, before training (`enforce_staleness_cap`), whatever the dataset
filter was: a row staler than the cap is dropped and counted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from conductor.store.models import TrainingStep
from reward_pipeline.training.dataset import Row, reward_by_source

__all__ = ["StepHealth", "cycle_health", "enforce_staleness_cap", "record_steps"]

#: Step metrics averaged over a cycle's steps (weighted by tokens).
_AVERAGED = ("iw_mean", "ess", "capped_fraction", "clip_fraction", "kl_behaviour_current")


class StepHealth:
    """Collects one optimizer step's per-token tensors (`LossParts.tokens`) and summarises them."""

    def __init__(self, importance_cap: float) -> None:
        self.cap = importance_cap
        self._parts: list[dict[str, Any]] = []

    def add(self, tokens: dict[str, Any]) -> None:
        if tokens:
            self._parts.append(tokens)

    def summary(self, rows: Sequence[Row]) -> dict[str, Any]:
        import torch

        out: dict[str, Any] = {
            "staleness": dict(sorted(Counter(r.staleness for r in rows).items())),
            "reward_by_source": reward_by_source(rows),
        }
        if not self._parts:
            return out
        on = torch.cat([p["mask"].flatten() > 0 for p in self._parts])
        w = torch.cat([p["weight_raw"].flatten().double() for p in self._parts])[on]
        clipped = torch.cat([p["clipped"].flatten() for p in self._parts])[on]
        log_ratio = torch.cat([p["log_ratio_behaviour"].flatten().double() for p in self._parts])[on]
        n = int(w.numel())
        if n == 0:
            return out
        out.update(
            tokens=n,
            iw_min=float(w.min()),
            iw_mean=float(w.mean()),
            iw_max=float(w.max()),
            ess=float(w.sum() ** 2 / (n * (w**2).sum())) if float((w**2).sum()) > 0 else 0.0,
            capped_fraction=float((w > self.cap).double().mean()),
            clip_fraction=float(clipped.double().mean()),
            kl_behaviour_current=float(log_ratio.mean()),
        )
        return out


def enforce_staleness_cap(groups: Iterable[list[Row]], cap: int) -> tuple[list[list[Row]], int]:
    """The groups without rows staler than `cap` promotions, and how many rows were dropped."""
    kept: list[list[Row]] = []
    dropped = 0
    for g in groups:
        fresh = [r for r in g if r.staleness <= cap]
        dropped += len(g) - len(fresh)
        if fresh:
            kept.append(fresh)
    return kept, dropped


def cycle_health(groups: Sequence[list[Row]], steps: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A cycle's health: its data (zero-variance groups, staleness, reward by source) and its steps."""
    rows = [r for g in groups for r in g]
    zero = sum(1 for g in groups if len({r.reward for r in g}) <= 1)
    out: dict[str, Any] = {
        "groups": len(groups),
        "zero_variance_fraction": zero / len(groups) if groups else None,
        "staleness": dict(sorted(Counter(r.staleness for r in rows).items())),
        "reward_by_source": reward_by_source(rows),
        "steps": len(steps),
    }
    measured = [s for s in steps if s.get("tokens")]
    if measured:
        tokens = sum(s["tokens"] for s in measured)
        out["iw_min"] = min(s["iw_min"] for s in measured)
        out["iw_max"] = max(s["iw_max"] for s in measured)
        for key in _AVERAGED:
            out[key] = sum(s[key] * s["tokens"] for s in measured) / tokens
    return out


def record_steps(
    sessions: sessionmaker[Session], steps: Sequence[dict[str, Any]], *, cycle_id: int | None, checkpoint_id: str | None
) -> None:
    """Store each optimizer step's record (`train status` and `train report` read them back)."""
    with sessions.begin() as s:
        s.add_all(
            TrainingStep(cycle_id=cycle_id, checkpoint_id=checkpoint_id, step=int(st.get("step", i)), metrics=_json(st))
            for i, st in enumerate(steps)
        )


def _json(record: dict[str, Any]) -> dict[str, Any]:
    """JSON-safe: staleness keys become strings, numbers stay numbers."""
    import json

    return dict(json.loads(json.dumps(record, default=str)))
