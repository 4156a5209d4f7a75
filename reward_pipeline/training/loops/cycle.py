"""One continuous-retraining cycle, as the `train` queue runs it: production traces since the last
cycle -> offline GRPO continuing from the active adapter -> candidate checkpoint -> gate (candidate
and active policy pinned on dev jobs through the same queue) -> promotion. Recorded in
`training_cycles` whatever happens."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select

from conductor.app.service import Service
from conductor.config.pool import ConductorSpec
from conductor.inference.local_model import model_dir
from conductor.store.models import TrainingCycle
from reward_pipeline.training.board import TrainingBoard
from reward_pipeline.training.checkpoints import Registry
from reward_pipeline.training.dataset import TraceFilter, build_dataset
from reward_pipeline.training.gate import GateConfig, PolicyEval, decide
from reward_pipeline.training.grpo import OfflineGRPOTrainer, make_config
from reward_pipeline.training.health import cycle_health, enforce_staleness_cap, record_steps
from reward_pipeline.training.loops.online import Policy, continue_from
from reward_pipeline.training.loops.phases import timed
from reward_pipeline.training.loops.stages import checkpoint_dir
from reward_pipeline.training.policy import LoraSpec, load_trainable, save_adapter
from reward_pipeline.training.problems import dev_problems
from reward_pipeline.training.rollouts import Rollouts


@dataclass(frozen=True)
class CycleConfig:
    max_staleness: int = 2
    learning_rate: float = 2e-5
    gate: GateConfig = field(default_factory=GateConfig)
    dev_limit: int | None = None
    #: Fewer groups with reward variance than this: the cycle is skipped, the reason recorded.
    min_groups: int = 1

    @classmethod
    def from_settings(cls, settings: Any) -> CycleConfig:
        return cls(
            max_staleness=settings.max_staleness,
            min_groups=settings.retrain_min_groups,
            dev_limit=settings.retrain_dev_limit,
        )


def board_dir(home: Path) -> Path:
    """Where beat's cycles write their TensorBoard runs: `cycles` (one point per cycle) and
    `cycle-<id>` (that cycle's optimizer steps)."""
    return home / "tensorboard"


def pinned_eval(rollouts: Rollouts, policy: Policy, problems: list[Any], tag: str) -> PolicyEval:
    """Dev jobs whose Conductor calls are pinned to `policy` (the base model when it has no adapter)."""
    options: dict[str, Any] = {"gate": tag}
    if policy.adapter is not None:
        options["policy"] = {"version": policy.version, "adapter": str(policy.adapter)}
    return PolicyEval.from_rollouts(policy.version, rollouts.run(problems, samples=1, options=options))


def run_retrain_cycle(
    service: Service,
    cycle_id: int,
    data_dir: Path,
    config: CycleConfig | None = None,
    load_adapter: Any = None,
    *,
    conductor: ConductorSpec | None = None,
) -> dict[str, Any]:
    """`load_adapter(version, path)` makes an adapter servable (vLLM runtime load) before the gate uses it.
    `config`: by default from the settings (staleness cap, minimum groups, dev set size). `conductor`: the
    pool's own, whose shipped adapter training starts from while no checkpoint is active."""
    config = config or CycleConfig.from_settings(service.settings)
    registry = Registry(service.sessions)
    with service.sessions.begin() as s:
        row = s.get_one(TrainingCycle, cycle_id)
        row.status = "running"
        since = s.scalar(
            select(TrainingCycle.created_at)
            .where(TrainingCycle.id != cycle_id, TrainingCycle.status == "done")
            .order_by(TrainingCycle.created_at.desc())
        )
    stats: dict[str, Any] = {}
    try:
        stats = _cycle(service, registry, cycle_id, since, data_dir, config, load_adapter, conductor)
        status = "done" if stats.get("candidate") else "skipped"
        error = None
    except Exception as exc:
        status, error = "failed", repr(exc)
    board = TrainingBoard(board_dir(service.settings.home) / "cycles")
    board.cycle(
        cycle_id,
        health=stats.get("health"),
        gate=stats.get("gate"),
        status={"done": status == "done", "skipped": status == "skipped"},
    )
    board.close()
    with service.sessions.begin() as s:
        row = s.get_one(TrainingCycle, cycle_id)
        row.status, row.error, row.finished_at = status, error, datetime.now(UTC)
        row.stats = json.loads(json.dumps(stats, default=str))
        row.checkpoint_id = stats.get("candidate")
    return {"status": status, "error": error, **stats}


def _cycle(
    service: Service,
    registry: Registry,
    cycle_id: int,
    since: datetime | None,
    data_dir: Path,
    config: CycleConfig,
    load_adapter: Any,
    conductor: ConductorSpec | None,
) -> dict[str, Any]:
    until = datetime.now(UTC)
    seconds: dict[str, float] = {}
    flt = TraceFilter(
        since=since,
        until=until,
        max_staleness=config.max_staleness,
        train_on_tenant_data=service.settings.train_on_tenant_data,
    )
    with timed(seconds, "dataset"):
        dataset = build_dataset(service.sessions, flt)
    groups, too_stale = enforce_staleness_cap(dataset.groups, config.max_staleness)
    stats: dict[str, Any] = {
        "dataset": dataset.stats(),
        "window": {"since": since, "until": until},
        "staleness_cap": {"max": config.max_staleness, "dropped_rows": too_stale},
        "health": cycle_health(groups, []),
        "seconds": seconds,
    }
    trainable = [g for g in groups if len({r.reward for r in g}) > 1]
    if len(trainable) < config.min_groups:
        judged = sum(1 for g in trainable if any(r.source == "judge" for r in g))
        stats["skipped"] = (
            f"{len(trainable)} groups with reward variance ({judged} judged) of {len(groups)}; "
            f"a cycle needs at least {config.min_groups}"
        )
        return stats
    from transformers import AutoTokenizer

    # Fresh from install no checkpoint is active: the traces are the shipped adapter's, so it is what trains.
    start = continue_from(registry, conductor)
    base = model_dir(service.settings.model_cache)
    # Each cycle's trainer counts its optimizer steps from 1: one TensorBoard run per cycle.
    steps_board = TrainingBoard(board_dir(service.settings.home) / f"cycle-{cycle_id}")
    trainer = OfflineGRPOTrainer(
        load_trainable(base, start.adapter, LoraSpec()),
        AutoTokenizer.from_pretrained(base),
        make_config(service.settings.home / "_grpo", learning_rate=config.learning_rate),
        log=steps_board.step,
    )
    try:
        with timed(seconds, "train"):
            summary = trainer.train(groups)
    finally:
        steps_board.close()
    version = registry.new_id("grpo")
    stats["health"] = cycle_health(groups, summary["steps"])
    record_steps(service.sessions, summary["steps"], cycle_id=cycle_id, checkpoint_id=version)
    path = save_adapter(trainer.model, None, checkpoint_dir(service.settings.home, version))
    registry.add(
        id=version,
        parent_id=start.version if start.adapter else None,
        stage="grpo",
        base_model=base.name,
        path=path,
        config={"cycle": {"max_staleness": config.max_staleness, "learning_rate": config.learning_rate}},
        metrics={"train": {k: v for k, v in summary.items() if k != "steps"}, "steps": summary["steps"]},
        data_window={"since": str(since), "until": str(until), **dataset.stats()},
    )
    if load_adapter is not None:
        load_adapter(version, path)
    dev = dev_problems(data_dir)[: config.dev_limit]
    rollouts = Rollouts(service)
    with timed(seconds, "gate_candidate"):
        cand = pinned_eval(rollouts, Policy(version, path), dev, f"gate:{version}")
    with timed(seconds, "gate_active"):
        # The pool's own adapter is evaluated as it serves (unpinned): a vLLM server holds it under the pool's
        # model name, not under a checkpoint's.
        served = Policy(start.version, None) if start.served_by_pool else start
        active = pinned_eval(rollouts, served, dev, f"gate:{version}:active")
    decision = decide(cand, active, config.gate)
    registry.record_gate(version, decision)
    if decision["passed"]:
        registry.promote(version)
    stats.update(candidate=version, gate=decision, train=summary["rows_trained"])
    return stats
