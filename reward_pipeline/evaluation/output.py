"""An evaluation's files: results.json (config, per-cell and pooled statistics), report.md and two plots."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from conductor.config.pool import Pool
from conductor.config.settings import Settings
from reward_pipeline.evaluation.baselines import Method
from reward_pipeline.evaluation.problems import Benchmark
from reward_pipeline.evaluation.report import (
    aggregate,
    markdown,
    pareto_fronts,
    plot_accuracy_by_benchmark,
    plot_accuracy_vs_tokens,
    plot_pareto,
)
from reward_pipeline.evaluation.route_table import route_table, route_table_markdown

RESULTS_JSONL = "results.jsonl"
#: the settings that shape a run's jobs, recorded with its results
_RUN_SETTINGS = (
    "max_steps",
    "recursion",
    "max_rounds",
    "max_depth",
    "plan_retries",
    "fallback_worker",
    "tool_miss_fallback",
    "plan_grammar",
    "max_model_calls",
)


def write_report(
    ran_on: tuple[Pool, Settings] | None,
    out: Path,
    records: list[dict[str, Any]],
    *,
    benchmarks: list[Benchmark],
    methods: list[Method],
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """results.json, report.md and the two plots for `records`; `ran_on`: the pool and settings
    that ran them (None: records read back from a file)."""
    bench_labels = [b.label for b in benchmarks]
    method_labels = [m.label for m in methods]
    summary = aggregate(records, benchmarks=bench_labels, methods=method_labels)
    table = markdown(summary, benchmarks=bench_labels, methods=method_labels)
    summary["pareto"] = pareto_fronts(summary)
    routes = route_table(records, method_labels)
    if routes is not None:
        summary["route_table"] = routes
        table += "\n## Route table (accuracy per kind per route, 95% intervals)\n\n" + route_table_markdown(
            routes, method_labels
        )
    policy = ran_on[0].conductor.policy_version if ran_on is not None else None
    files = {
        "results_json": out / "results.json",
        "report_md": out / "report.md",
        "results_jsonl": out / RESULTS_JSONL,
        "accuracy_vs_tokens": plot_accuracy_vs_tokens(summary, out / "accuracy_vs_tokens.png"),
        "accuracy_vs_cost": plot_pareto(summary, out / "accuracy_vs_cost.png", policy=policy),
        "accuracy_by_benchmark": plot_accuracy_by_benchmark(
            summary, out / "accuracy_by_benchmark.png", benchmarks=bench_labels, methods=method_labels
        ),
    }
    payload = {
        "config": _run_config(ran_on, benchmarks, method_labels, extra),
        "summary": summary,
        "generated_at": datetime.now(UTC).isoformat(),
        "records": len(records),
    }
    files["results_json"].write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")
    files["report_md"].write_text(
        "# Evaluation\n\n"
        f"Benchmarks: {', '.join(f'{b.label} ({len(b.problems)})' for b in benchmarks)}; "
        f"methods: {', '.join(method_labels)}.\n\n{table}\n"
        f"Pareto front (nothing more accurate for less): by USD {', '.join(summary['pareto']['usd'])}; "
        f"by tokens {', '.join(summary['pareto']['tokens'])}.\n\n"
        "![accuracy vs cost](accuracy_vs_cost.png)\n\n"
        "![accuracy vs tokens](accuracy_vs_tokens.png)\n\n![accuracy by benchmark](accuracy_by_benchmark.png)\n",
        encoding="utf-8",
    )
    return {"summary": summary, "table": table, "files": files}


def _run_config(
    ran_on: tuple[Pool, Settings] | None,
    benchmarks: list[Benchmark],
    method_labels: list[str],
    extra: dict[str, Any] | None,
) -> dict[str, Any]:
    """What was run, and with which pool and settings (when known)."""
    config: dict[str, Any] = {
        "benchmarks": [
            {"name": b.label, "path": str(b.path), "problems": len(b.problems), "rejected": len(b.rejected)}
            for b in benchmarks
        ],
        "methods": method_labels,
        **(extra or {}),
    }
    if ran_on is not None:
        pool, st = ran_on
        config["pool"] = {
            "conductor": pool.conductor.model,
            "policy_version": pool.conductor.policy_version,
            "workers": {w.name: w.model for w in pool.workers},
        }
        config["settings"] = {k: getattr(st, k) for k in _RUN_SETTINGS}
    return config
