"""The paper's loop through this queue: each iteration submits training problems with G samples
under the current policy, waits for their rewards, and trains on exactly those traces (staleness 0);
every few iterations the newest adapter goes through the gate and, if it passes, is promoted.

Online and offline are one trainer (`OfflineGRPOTrainer`) fed two ways: here the dataset builder is
restricted to the iteration's own jobs.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from conductor.config.pool import ConductorSpec
from conductor.domain.problem import Problem
from conductor.inference.gateway import Gateway
from conductor.store.lineage import TENANTS_KEY
from conductor.store.models import TrainingCycle
from reward_pipeline.training.checkpoints import CheckpointView, Registry
from reward_pipeline.training.dataset import TraceFilter, build_dataset
from reward_pipeline.training.export import WEIGHTS, record_entry
from reward_pipeline.training.gate import GateConfig, PolicyEval, decide, evaluate
from reward_pipeline.training.grpo import OfflineGRPOTrainer
from reward_pipeline.training.loops.phases import timed
from reward_pipeline.training.loops.stages import checkpoint_dir, problems_digest
from reward_pipeline.training.policy import save_adapter
from reward_pipeline.training.rollouts import Rollouts


class Serving(Protocol):
    def load(self, version: str, adapter: Path | None) -> None: ...
    def activate(self, gateway: Gateway, version: str, adapter: Path | None, *, temperature: float) -> None: ...


@dataclass(frozen=True)
class OnlineConfig:
    cycles: int = 3
    iterations_per_cycle: int = 2
    problems_per_iteration: int = 8
    samples: int = 4  #: G
    train_temperature: float = 1.0  #: the paper's rollout temperature; top-p 1, no top-k
    eval_temperature: float = 0.3
    seed: int = 0
    gate: GateConfig = field(default_factory=GateConfig)


@dataclass
class Policy:
    version: str
    adapter: Path | None
    #: the adapter the pool ships, served under the pool's own model name rather than a checkpoint's
    served_by_pool: bool = field(default=False, compare=False)


@dataclass
class GateContext:
    """What gating a candidate needs: the queue, the serving side and the registry (no trainer)."""

    rollouts: Rollouts
    gateway: Gateway
    serving: Serving
    registry: Registry
    log: Callable[[dict[str, Any]], None] = print


@dataclass(kw_only=True)
class LoopContext(GateContext):
    """The gate's parts plus what training iterations need."""

    trainer: OfflineGRPOTrainer
    home: Path
    base_model: str


def _evaluate(ctx: GateContext, policy: Policy, problems: Sequence[Problem], cfg: OnlineConfig, tag: str) -> PolicyEval:
    ctx.serving.activate(ctx.gateway, policy.version, policy.adapter, temperature=cfg.eval_temperature)
    return evaluate(ctx.rollouts, policy.version, problems, tag=tag)


def iteration(
    ctx: LoopContext, policy: Policy, problems: Sequence[Problem], cfg: OnlineConfig, *, name: str
) -> tuple[Policy, dict[str, Any]]:
    """Rollouts under `policy`, GRPO on exactly those traces, the new adapter saved as a checkpoint."""
    seconds: dict[str, float] = {}
    with timed(seconds, "serve_adapter"):
        ctx.serving.activate(ctx.gateway, policy.version, policy.adapter, temperature=cfg.train_temperature)
    with timed(seconds, "rollouts"):
        batch = ctx.rollouts.run(problems, samples=cfg.samples, options={"train": name})
    service = ctx.rollouts.service
    flt = TraceFilter(job_ids=frozenset(batch.job_ids), train_on_tenant_data=service.settings.train_on_tenant_data)
    with timed(seconds, "dataset"):
        dataset = build_dataset(service.sessions, flt)
    with timed(seconds, "train"):
        summary = ctx.trainer.train(dataset.groups)
    version = ctx.registry.new_id("grpo")
    with timed(seconds, "save"):
        out = save_adapter(ctx.trainer.model, ctx.trainer.tokenizer, checkpoint_dir(ctx.home, version))
    steps = summary.pop("steps")
    metrics = {
        "rollouts": batch.as_dict(),
        "dataset": dataset.stats(),
        "train": summary,
        "train_steps": steps,
        "seconds": seconds,
    }
    ctx.registry.add(
        id=version,
        parent_id=policy.version if policy.adapter else None,
        stage="grpo",
        base_model=ctx.base_model,
        path=out,
        config={"online": asdict(cfg), "trl": _trl_fields(ctx.trainer.config)},
        metrics=metrics,
        data_window={
            "jobs": batch.job_ids,
            "problems_sha256": problems_digest(list(problems)),
            "staleness": 0,
            TENANTS_KEY: dataset.tenant_ids,
        },
    )
    ctx.log({"event": "iteration", "name": name, "version": version, **metrics["rollouts"], **summary})
    return Policy(version, out), metrics


def gate_and_promote(
    ctx: GateContext, candidate: Policy, active: Policy, dev: Sequence[Problem], cfg: OnlineConfig
) -> dict[str, Any]:
    seconds: dict[str, float] = {}
    with timed(seconds, "candidate"):
        cand = _evaluate(ctx, candidate, dev, cfg, tag=f"gate:{candidate.version}")
    with timed(seconds, "active"):
        base = _evaluate(ctx, active, dev, cfg, tag=f"gate:{candidate.version}:active")
    decision = {**decide(cand, base, cfg.gate), "decided_at": datetime.now(UTC).isoformat(), "seconds": seconds}
    ctx.registry.record_gate(candidate.version, decision)
    if decision["passed"]:
        ctx.registry.promote(candidate.version)
    ctx.log({"event": "gate", "candidate": candidate.version, "passed": decision["passed"], **decision})
    return decision


def run_cycles(
    ctx: LoopContext,
    start: Policy,
    train: Sequence[Problem],
    dev: Sequence[Problem],
    cfg: OnlineConfig,
    *,
    report: Path | None = None,
    on_cycle: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """`cfg.cycles` cycles of iterations -> gate -> promote; every cycle is a `training_cycles` row."""
    rng = random.Random(cfg.seed)
    pool = list(train)
    active, current = start, start
    history: list[dict[str, Any]] = []
    if report is not None:  # written even with no cycle (a warm-up that was only gated), for the report
        report.write_text("[]\n")
    for c in range(cfg.cycles):
        cycle_id = _open_cycle(ctx, trigger="online")
        record: dict[str, Any] = {"cycle": c + 1, "iterations": []}
        try:
            for i in range(cfg.iterations_per_cycle):
                batch = rng.sample(pool, min(cfg.problems_per_iteration, len(pool)))
                current, metrics = iteration(ctx, current, batch, cfg, name=f"cycle{c + 1}-it{i + 1}")
                record["iterations"].append({"version": current.version, **metrics})
            record["gate"] = gate_and_promote(ctx, current, active, dev, cfg)
            if record["gate"]["passed"]:
                active = current
            else:  # keep exploring from the active policy, not from a rejected one
                current = active
                ctx.trainer.reset_to(active.adapter)
            _close_cycle(ctx, cycle_id, "done", record, checkpoint=current.version)
        except Exception as exc:
            _close_cycle(ctx, cycle_id, "failed", record, error=repr(exc))
            raise
        history.append(record)
        if report is not None:
            report.write_text(json.dumps(history, indent=1, default=str))
        if on_cycle:
            on_cycle(record)
    return history


def _open_cycle(ctx: LoopContext, *, trigger: str) -> int:
    with ctx.registry.sessions.begin() as s:
        row = TrainingCycle(trigger=trigger, status="running", stats={})
        s.add(row)
        s.flush()
        return row.id


def _close_cycle(
    ctx: LoopContext,
    cycle_id: int,
    status: str,
    stats: dict[str, Any],
    *,
    checkpoint: str | None = None,
    error: str | None = None,
) -> None:
    summary = {
        "iterations": [
            {"version": it["version"], **it["rollouts"], "train": it["train"]} for it in stats.get("iterations", [])
        ],
        "gate": stats.get("gate"),
    }
    with ctx.registry.sessions.begin() as s:
        row = s.get(TrainingCycle, cycle_id)
        if row is not None:
            row.status, row.stats, row.error = status, json.loads(json.dumps(summary, default=str)), error
            row.checkpoint_id, row.finished_at = checkpoint, datetime.now(UTC)


def _trl_fields(config: Any) -> dict[str, Any]:
    from reward_pipeline.training.grpo import USED_TRL_FIELDS

    return {k: getattr(config, k) for k in USED_TRL_FIELDS}


def start_policy(active: CheckpointView | None) -> Policy:
    if active is None or not active.path:
        return Policy("base", None)
    return Policy(active.id, Path(active.path))


def continue_from(registry: Registry, conductor: ConductorSpec | None) -> Policy:
    """The policy training continues from: the store's active checkpoint; else the adapter the pool ships,
    which is what serves (and wrote the traces) while none is active, registered once from its record so
    that what is trained from it has a parent; else the base model."""
    active = registry.active()
    adapter = conductor.adapter_path() if conductor is not None else None
    if active is not None or conductor is None or adapter is None or not (adapter / WEIGHTS).exists():
        return start_policy(active)
    registry.add_shipped(
        id=conductor.policy_version, path=adapter, record=record_entry(adapter, conductor.policy_version)
    )
    return Policy(conductor.policy_version, adapter, served_by_pool=True)
