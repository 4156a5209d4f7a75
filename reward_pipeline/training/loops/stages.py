"""Recorded pipeline stages: each writes an adapter, registers it as a checkpoint row with the exact
config and data that made it, and returns the row."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from conductor.config.pool import Pool
from conductor.domain.problem import Problem
from conductor.store.lineage import TENANTS_KEY
from reward_pipeline.training.checkpoints import CheckpointView, Registry
from reward_pipeline.training.warmup import WarmupConfig, build_examples, run_warmup


def problems_digest(problems: list[Problem]) -> str:
    h = hashlib.sha256()
    for p in problems:
        h.update(json.dumps([p.id, p.question, p.answer], sort_keys=True).encode())
    return h.hexdigest()


def checkpoint_dir(home: Path, checkpoint_id: str) -> Path:
    return home / "checkpoints" / checkpoint_id


def warmup_stage(
    *,
    registry: Registry,
    pool: Pool,
    problems: list[Problem],
    base_model: Path,
    home: Path,
    config: WarmupConfig,
    max_steps: int = 5,
    provenance: dict[str, Any] | None = None,
) -> CheckpointView:
    """Synthetic validated plans -> SFT LoRA -> a candidate checkpoint (stage `warmup`)."""
    examples = build_examples(
        problems,
        pool.cards(),
        n=config.examples,
        max_steps=max_steps,
        seed=config.seed,
        verified_share=config.verified_share,
    )
    ckpt_id = registry.new_id("warmup")
    out = checkpoint_dir(home, ckpt_id)
    metrics = run_warmup(examples, base_model=base_model, out_dir=out, config=config)
    return registry.add(
        id=ckpt_id,
        parent_id=None,
        stage="warmup",
        base_model=str(base_model.name),
        path=out,
        config={"warmup": dataclasses.asdict(config), **(provenance or {})},
        metrics=metrics,
        # Benchmark and generated problems, no tenant's traffic.
        data_window={"problems": len(problems), "problems_sha256": problems_digest(problems), TENANTS_KEY: []},
    )
