"""Evaluation results -> statistics, Markdown tables and plots.

Input: result records, one per (benchmark, method, problem), as the eval harness writes them
to ``results.jsonl``. Accuracy counts only verified problems (``correct`` not None); a failed
job counts as wrong. Intervals are 95% Wilson score intervals (well-behaved at 0%, 100% and
small n, unlike the normal approximation). Latency is job creation to job end, so it
includes queueing. ``avg`` is the unweighted mean over benchmarks (the paper's average);
``all`` pools every problem of a method.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from conductor.domain.states import JobStatus

__all__ = [
    "Cell",
    "aggregate",
    "markdown",
    "percentile",
    "plot_accuracy_by_benchmark",
    "plot_accuracy_vs_tokens",
    "wilson_interval",
]

Z95 = 1.959963984540054


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval for a binomial proportion; (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # At 0 and n the bound is exactly 0 or 1; floating point would leave 1e-17 either side.
    lo = 0.0 if successes == 0 else max(0.0, centre - half)
    hi = 1.0 if successes == n else min(1.0, centre + half)
    return lo, hi


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in [0, 100]); None for no values."""
    xs = sorted(values)
    if not xs:
        return None
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _mean(values: Iterable[float | None]) -> float | None:
    xs = [float(v) for v in values if v is not None]
    return sum(xs) / len(xs) if xs else None


@dataclass
class Cell:
    """The statistics of one method on one benchmark (or on all of them: benchmark ``all``)."""

    benchmark: str
    method: str
    n: int
    scored: int
    correct: int
    accuracy: float | None
    ci_low: float | None
    ci_high: float | None
    tokens_per_question: float | None
    cost_per_question: float | None
    latency_p50_s: float | None
    latency_p95_s: float | None
    steps_per_workflow: float | None
    failed: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _cell(benchmark: str, method: str, records: list[dict[str, Any]]) -> Cell:
    scored = [r for r in records if r.get("correct") is not None]
    correct = sum(1 for r in scored if r["correct"])
    lo, hi = wilson_interval(correct, len(scored)) if scored else (None, None)
    latencies = [float(r["latency_s"]) for r in records if r.get("latency_s") is not None]
    return Cell(
        benchmark=benchmark,
        method=method,
        n=len(records),
        scored=len(scored),
        correct=correct,
        accuracy=correct / len(scored) if scored else None,
        ci_low=lo,
        ci_high=hi,
        tokens_per_question=_mean(r.get("tokens") for r in records),
        cost_per_question=_mean(r.get("cost_usd") for r in records),
        latency_p50_s=percentile(latencies, 50),
        latency_p95_s=percentile(latencies, 95),
        steps_per_workflow=_mean(r.get("steps_per_workflow") for r in records),
        failed=sum(1 for r in records if r.get("status") != JobStatus.DONE),
    )


def aggregate(
    records: Iterable[dict[str, Any]], *, benchmarks: Sequence[str], methods: Sequence[str]
) -> dict[str, Any]:
    """Cells per (benchmark, method), pooled cells per method, and each method's benchmark average."""
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        by.setdefault((r["benchmark"], r["method"]), []).append(r)
    cells = [_cell(b, m, by.get((b, m), [])) for m in methods for b in benchmarks]
    pooled = [_cell("all", m, [r for b in benchmarks for r in by.get((b, m), [])]) for m in methods]
    average = {
        m: _mean(c.accuracy for c in cells if c.method == m)
        if all(c.accuracy is not None for c in cells if c.method == m)
        else None
        for m in methods
    }
    return {"cells": [c.as_dict() for c in cells], "overall": [c.as_dict() for c in pooled], "average": average}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def markdown(summary: dict[str, Any], *, benchmarks: Sequence[str], methods: Sequence[str]) -> str:
    """Two tables: accuracy per benchmark with cost columns (like the paper's), then every cell in full."""
    cells = {(c["benchmark"], c["method"]): c for c in summary["cells"]}
    overall = {c["method"]: c for c in summary["overall"]}
    lines = _accuracy_table(summary, cells, overall, benchmarks, methods)
    lines += [
        "",
        (
            "Accuracy in % (avg: mean over benchmarks); tokens, USD, latency (submission to job end) and "
            "steps per workflow over all problems. Per cell, with 95% Wilson intervals:"
        ),
        "",
    ]
    lines += _cells_table(cells, overall, benchmarks, methods)
    return "\n".join(lines) + "\n"


def _table_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _table_head(head: Sequence[str]) -> list[str]:
    return [_table_row(head), "|" + "---|" * len(head)]


def _accuracy_table(
    summary: dict[str, Any],
    cells: dict[tuple[str, str], dict[str, Any]],
    overall: dict[str, dict[str, Any]],
    benchmarks: Sequence[str],
    methods: Sequence[str],
) -> list[str]:
    """One row per method: accuracy per benchmark, their average, and the cost columns over all problems."""
    head = ["method", *benchmarks, "avg", "tokens / q", "USD / q", "latency p50 s", "latency p95 s", "steps / wf"]
    lines = _table_head(head)
    for m in methods:
        o = overall[m]
        row = [
            m,
            *(_pct(cells[(b, m)]["accuracy"]) for b in benchmarks),
            _pct(summary["average"].get(m)),
            _num(o["tokens_per_question"], ",.0f"),
            _num(o["cost_per_question"], ".6f"),
            _num(o["latency_p50_s"], ".1f"),
            _num(o["latency_p95_s"], ".1f"),
            _num(o["steps_per_workflow"], ".2f"),
        ]
        lines.append(_table_row(row))
    return lines


_CELL_HEAD = (
    "benchmark",
    "method",
    "n",
    "correct",
    "accuracy %",
    "95% CI",
    "tokens / q",
    "USD / q",
    "p50 s",
    "p95 s",
    "steps / wf",
    "failed",
)


def _cells_table(
    cells: dict[tuple[str, str], dict[str, Any]],
    overall: dict[str, dict[str, Any]],
    benchmarks: Sequence[str],
    methods: Sequence[str],
) -> list[str]:
    """Every (benchmark, method) cell in full, then each method over all benchmarks ("all")."""
    lines = _table_head(_CELL_HEAD)
    for b in [*benchmarks, "all"]:
        for m in methods:
            c = overall[m] if b == "all" else cells[(b, m)]
            ci = "-" if c["ci_low"] is None else f"[{_pct(c['ci_low'])}, {_pct(c['ci_high'])}]"
            row = [
                b,
                m,
                str(c["n"]),
                f"{c['correct']}/{c['scored']}",
                _pct(c["accuracy"]),
                ci,
                _num(c["tokens_per_question"], ",.0f"),
                _num(c["cost_per_question"], ".6f"),
                _num(c["latency_p50_s"], ".1f"),
                _num(c["latency_p95_s"], ".1f"),
                _num(c["steps_per_workflow"], ".2f"),
                str(c["failed"]),
            ]
            lines.append(_table_row(row))
    return lines


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on servers and CI
    import matplotlib.pyplot as plt

    return plt


def plot_accuracy_vs_tokens(summary: dict[str, Any], path: Path) -> Path:
    """One point per method: pooled accuracy (with its interval) against tokens per question."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 5), dpi=110)
    for c in summary["overall"]:
        if c["accuracy"] is None or c["tokens_per_question"] is None:
            continue
        y = 100 * c["accuracy"]
        err = [[y - 100 * c["ci_low"]], [100 * c["ci_high"] - y]]
        ax.errorbar(c["tokens_per_question"], y, yerr=err, fmt="o", capsize=4, label=c["method"])
        ax.annotate(c["method"], (c["tokens_per_question"], y), textcoords="offset points", xytext=(6, 6), fontsize=8)
    xs = [c["tokens_per_question"] for c in summary["overall"] if c["tokens_per_question"]]
    if xs and max(xs) / max(min(xs), 1e-9) > 20:
        ax.set_xscale("log")
    ax.set_xlabel("tokens per question")
    ax.set_ylabel("accuracy % (all benchmarks, 95% Wilson CI)")
    ax.set_ylim(-2, 102)
    ax.set_title("Accuracy vs. tokens per question")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_accuracy_by_benchmark(
    summary: dict[str, Any], path: Path, *, benchmarks: Sequence[str], methods: Sequence[str]
) -> Path:
    """Grouped bars: accuracy of every method on every benchmark, with 95% intervals."""
    plt = _pyplot()
    cells = {(c["benchmark"], c["method"]): c for c in summary["cells"]}
    width = 0.8 / max(1, len(methods))
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(benchmarks) * max(1, len(methods)) ** 0.5 + 3), 5), dpi=110)
    for j, m in enumerate(methods):
        xs, ys, lo, hi = [], [], [], []
        for i, b in enumerate(benchmarks):
            c = cells[(b, m)]
            y = 100 * (c["accuracy"] or 0.0)
            xs.append(i + (j - (len(methods) - 1) / 2) * width)
            ys.append(y)
            lo.append(y - 100 * c["ci_low"] if c["ci_low"] is not None else 0.0)
            hi.append(100 * c["ci_high"] - y if c["ci_high"] is not None else 0.0)
        ax.bar(xs, ys, width=width, label=m, yerr=[lo, hi], capsize=3)
    ax.set_xticks(range(len(benchmarks)))
    ax.set_xticklabels(benchmarks)
    ax.set_ylabel("accuracy % (95% Wilson CI)")
    ax.set_ylim(0, 105)
    ax.set_title("Accuracy per benchmark")
    ax.legend(fontsize=8, ncols=min(4, len(methods)))
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def pareto_front(points: Sequence[tuple[str, float, float]]) -> list[str]:
    """The labels of the (label, cost, accuracy) points no other point beats: none is at least as
    accurate for at most the cost and strictly better in one. Cheapest first."""
    front = [
        (cost, -acc, label)
        for label, cost, acc in points
        if not any(c <= cost and a >= acc and (c < cost or a > acc) for _, c, a in points)
    ]
    return [label for _, _, label in sorted(front)]


def pareto_fronts(summary: dict[str, Any]) -> dict[str, list[str]]:
    """The accuracy-per-dollar and accuracy-per-token fronts over the methods' pooled results."""
    fronts = {}
    for key, field in (("usd", "cost_per_question"), ("tokens", "tokens_per_question")):
        pts = [
            (c["method"], float(c[field]), float(c["accuracy"]))
            for c in summary["overall"]
            if c["accuracy"] is not None and c[field] is not None
        ]
        fronts[key] = pareto_front(pts)
    return fronts


def plot_pareto(summary: dict[str, Any], path: Path, *, policy: str | None = None) -> Path:
    """Accuracy against USD and against tokens per question, one point per method, with the front
    of methods nothing beats drawn as a line: the accuracy-per-dollar view."""
    plt = _pyplot()
    fronts = pareto_fronts(summary)
    by_method = {c["method"]: c for c in summary["overall"] if c["accuracy"] is not None}
    fig, axes = plt.subplots(1, 2, figsize=(12, 5), dpi=110)
    for ax, (key, field, label) in zip(
        axes,
        (("usd", "cost_per_question", "USD per question"), ("tokens", "tokens_per_question", "tokens per question")),
        strict=True,
    ):
        for m, c in by_method.items():
            if c[field] is None:
                continue
            on_front = m in fronts[key]
            ax.scatter(c[field], 100 * c["accuracy"], s=60 if on_front else 30, marker="o" if on_front else "x")
            ax.annotate(m, (c[field], 100 * c["accuracy"]), textcoords="offset points", xytext=(6, 6), fontsize=8)
        front = [by_method[m] for m in fronts[key]]
        if front:
            ax.plot(
                [c[field] for c in front], [100 * c["accuracy"] for c in front], "-", alpha=0.6, label="Pareto front"
            )
            ax.legend(fontsize=8, loc="lower right")
        if key == "usd" and all((c[field] or 0) == 0 for c in by_method.values()):
            ax.set_title("every method $0 here (self-hosted models): see tokens", fontsize=9)
        ax.set_xlabel(label)
        ax.set_ylabel("accuracy % (all benchmarks)")
        ax.set_ylim(-2, 102)
        ax.grid(alpha=0.3)
    fig.suptitle("Accuracy per cost" + (f" (Conductor policy {policy})" if policy else ""))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
