"""Recorded pipeline stages: each writes an adapter, registers it as a checkpoint row with the exact
config and data that made it, and returns the row."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from conductor.config.pool import Pool
from conductor.domain.errors import TrainingError
from conductor.domain.problem import Problem
from conductor.domain.prompts import QUESTION_REF
from conductor.store.lineage import TENANTS_KEY
from reward_pipeline.training.checkpoints import CheckpointView, Registry
from reward_pipeline.training.export import record_entry, record_row
from reward_pipeline.training.routes import (
    Answerer,
    RouteTrial,
    ToolRunner,
    build_route_examples,
    resample_unsolved,
    try_routes,
)
from reward_pipeline.training.soup import soup_adapters
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
        order=pool.conductor.plan_order,
    )
    ckpt_id = registry.new_id("warmup")
    out = checkpoint_dir(home, ckpt_id)
    metrics = run_warmup(examples, base_model=base_model, out_dir=out, config=config)
    return _register_warmup(
        registry,
        ckpt_id,
        out,
        base_model,
        problems,
        metrics,
        {"warmup": dataclasses.asdict(config), "plan_order": pool.conductor.plan_order, **(provenance or {})},
    )


def _register_warmup(
    registry: Registry,
    ckpt_id: str,
    out: Path,
    base_model: Path,
    problems: list[Problem],
    metrics: dict[str, Any],
    config: dict[str, Any],
) -> CheckpointView:
    return registry.add(
        id=ckpt_id,
        parent_id=None,
        stage="warmup",
        base_model=str(base_model.name),
        path=out,
        config=config,
        metrics=metrics,
        # Benchmark and generated problems, no tenant's traffic.
        data_window={"problems": len(problems), "problems_sha256": problems_digest(problems), TENANTS_KEY: []},
    )


def route_warmup_stage(  # noqa: PLR0913 -- keyword-only, one per recipe option (the CLI's)
    *,
    registry: Registry,
    pool: Pool,
    problems: list[Problem],
    base_model: Path,
    home: Path,
    config: WarmupConfig,
    answer: Answerer | None,
    tool: ToolRunner | None,
    max_steps: int = 3,
    replan_share: float = 0.0,
    pool_draw: Literal["subset-first", "problem-first", "full"] = "subset-first",
    provenance: dict[str, Any] | None = None,
    log: Any = print,
    recorded: dict[str, list[RouteTrial]] | None = None,
    resamples: int = 0,
    release: Callable[[], None] | None = None,
    balance_routes: bool = False,
    prefer_greedy: bool = False,
) -> CheckpointView:
    """Every problem's one-step routes run and scored -> examples of the routes that earned reward, on
    random renumbered subsets of the pool, plus replan rounds -> SFT LoRA -> a candidate checkpoint.

    ``release`` is called once the trials are run: whatever served them (a private vLLM server) is shut
    down before training needs every core. (Left running, its idle engine took half a core and the SFT
    steps of a 2-core machine ran at a third of their speed.)

    ``resamples``: that many more answers from each sampling model worker to the problems no trial solved
    (recorded or run now; `routes.resample_unsolved`), appended to the trials before examples are drawn."""
    if resamples > 0 and answer is None:
        raise ValueError("resampling the unsolved problems needs an answerer")
    started = time.perf_counter()
    if recorded is not None:
        trials = {str(p.id): recorded.get(str(p.id), []) for p in problems}
    elif answer is not None and tool is not None:
        trials = try_routes(problems, pool, answer=answer, tool=tool)
    else:
        raise ValueError("route trials need an answerer and a tool runner, or recorded trials")
    # The pool each example shows (`build_route_examples`): a random subset drawn before the problem or
    # after it, or the whole pool as deployed.
    randomise_pool, subset_first = pool_draw != "full", pool_draw == "subset-first"
    resolved = None
    if resamples > 0 and answer is not None:
        resolved = resample_unsolved(problems, trials, pool, answer=answer, samples=resamples)
    trial_s = time.perf_counter() - started
    if release is not None:
        release()
    built = build_route_examples(
        problems,
        trials,
        pool,
        n=config.examples,
        max_steps=max_steps,
        seed=config.seed,
        replan_share=replan_share,
        randomise_pool=randomise_pool,
        subset_first=subset_first,
        balance_routes=balance_routes,
        prefer_greedy=prefer_greedy,
    )
    if resolved is not None:
        built.stats["solved_by_resampling"] = resolved
    log(
        {
            "event": "route_trials",
            "seconds": round(trial_s, 1),
            **built.stats,
            "by_family": trial_table(problems, trials),
        }
    )
    ckpt_id = registry.new_id("warmup")
    out = checkpoint_dir(home, ckpt_id)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "route_trials.jsonl").open("w", encoding="utf-8") as f:
        for p in problems:
            for t in trials[str(p.id)]:
                f.write(
                    json.dumps({"problem": p.id, "family": p.metadata.get("family"), **dataclasses.asdict(t)}) + "\n"
                )
    metrics = run_warmup(built.examples, base_model=base_model, out_dir=out, config=config)
    metrics.update(route_trials=built.stats, route_trial_seconds=round(trial_s, 1))
    config_record = {
        "warmup": dataclasses.asdict(config),
        "curriculum": "mixed",
        "replan_share": replan_share,
        "randomise_pool": randomise_pool,
        "balance_kinds": True,
        "subset_first": subset_first,
        "balance_routes": balance_routes,
        "prefer_greedy": prefer_greedy,
        "resamples": resamples,
        "plan_order": pool.conductor.plan_order,
        **(provenance or {}),
    }
    return _register_warmup(registry, ckpt_id, out, base_model, problems, metrics, config_record)


def soup_stage(
    *,
    registry: Registry,
    home: Path,
    checkpoint_ids: list[str],
    adapters: list[Path] | None = None,
    weights: list[float] | None = None,
) -> CheckpointView:
    """Warm-up candidates (one recipe at several seeds) -> one adapter with the mean of their weight changes
    (`reward_pipeline.training.soup`) -> a candidate checkpoint (stage `soup`). ``adapters``: exported adapter
    folders (the shipped one, say) join the soup after the checkpoints, in that order (``weights`` follow it).
    Its config holds every source's own row (config, metrics, data window; an exported adapter's from its
    record.json), since a soup has no single parent for lineage to follow."""
    views = [registry.get(i) for i in checkpoint_ids]
    missing = [v.id for v in views if not v.path]
    if missing:
        raise TrainingError(f"checkpoints without weights cannot be souped: {', '.join(missing)}")
    sources = [record_row(v) for v in views]
    paths = [Path(v.path or "") for v in views]
    for adapter in adapters or []:
        entry = record_entry(adapter)
        if not entry:
            raise TrainingError(
                f"{adapter} has no record.json naming its checkpoint: a soup keeps where each part came from"
            )
        sources.append(entry | {"path": str(adapter)})
        paths.append(adapter)
    ckpt_id = registry.new_id("soup")
    out = checkpoint_dir(home, ckpt_id)
    result = soup_adapters(paths, out, weights)
    return registry.add(
        id=ckpt_id,
        parent_id=None,
        stage="soup",
        base_model=str(sources[0].get("base_model") or ""),
        path=out,
        config={"soup_of": [src["id"] for src in sources], "weights": list(result.weights), "sources": sources},
        metrics={"rank": result.rank},
        data_window={
            "problems": sum(int((src.get("data_window") or {}).get("problems", 0)) for src in sources),
            TENANTS_KEY: sorted({t for src in sources for t in (src.get("data_window") or {}).get(TENANTS_KEY, [])}),
        },
    )


def trial_table(problems: list[Problem], trials: dict[str, list[RouteTrial]]) -> dict[str, dict[str, str]]:
    """Per family, per worker: right/tried of its candidate route (the question itself for a tool is a
    candidate too, listed as `worker(question)`)."""
    table: dict[str, dict[str, list[int]]] = {}
    for p in problems:
        family = str(p.metadata.get("family", p.kind))
        for t in trials[str(p.id)]:
            key = f"{t.worker}(question)" if t.subtask == QUESTION_REF else t.worker
            cell = table.setdefault(family, {}).setdefault(key, [0, 0])
            cell[0] += int(t.correct)
            cell[1] += 1
    return {f: {k: f"{a}/{b}" for k, (a, b) in sorted(cells.items())} for f, cells in sorted(table.items())}
