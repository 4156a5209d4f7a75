"""The route table: accuracy per kind of question per fixed route, and the oracle router.

A problem file whose problems carry ``metadata.family`` (the mixed curriculum's held-out file does)
is reported per family as well as pooled. Every method but ``conductor`` and ``router`` is a *fixed
route* (the same workflow for every question); the **oracle router** sends each family to the fixed
route that scored best on it in this same run, chosen with hindsight: the best any router over these
routes could have done here, the mark a learned Conductor's choices are judged against. The
Conductor's own routes are summarised by the workers of its first plan, per family.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from reward_pipeline.evaluation.report import wilson_interval

__all__ = ["LEARNED", "route_table", "route_table_markdown"]

#: Methods whose workflow is chosen per question (not fixed routes).
LEARNED = ("conductor", "router")


def _acc(records: list[dict[str, Any]]) -> dict[str, Any]:
    scored = [r for r in records if r.get("correct") is not None]
    correct = sum(1 for r in scored if r["correct"])
    lo, hi = wilson_interval(correct, len(scored)) if scored else (None, None)
    tokens = [r["tokens"] for r in records if r.get("tokens") is not None]
    return {
        "n": len(scored),
        "correct": correct,
        "accuracy": correct / len(scored) if scored else None,
        "ci": [lo, hi],
        "tokens_per_question": sum(tokens) / len(tokens) if tokens else None,
    }


def route_table(records: Iterable[dict[str, Any]], methods: Sequence[str]) -> dict[str, Any] | None:
    """Per family and method: accuracy with its interval; the oracle router; the Conductor's routes.
    None when no record names a family."""
    rows = [r for r in records if r.get("family")]
    if not rows:
        return None
    families = sorted({r["family"] for r in rows})
    cells: dict[str, dict[str, Any]] = {}
    for f in families:
        cells[f] = {m: _acc([r for r in rows if r["family"] == f and r["method"] == m]) for m in methods}
    fixed = [m for m in methods if m.split(":")[0] not in LEARNED]
    oracle: dict[str, Any] = {"choice": {}, "correct": 0, "n": 0}
    for f in families:
        scored = [(cells[f][m]["correct"], m) for m in fixed if cells[f][m]["n"]]
        if not scored:
            continue
        best_correct, best = max(scored, key=lambda x: (x[0], -fixed.index(x[1])))
        oracle["choice"][f] = best
        oracle["correct"] += best_correct
        oracle["n"] += cells[f][best]["n"]
    if oracle["n"]:
        lo, hi = wilson_interval(oracle["correct"], oracle["n"])
        oracle.update(accuracy=oracle["correct"] / oracle["n"], ci=[lo, hi])
    pooled = {m: _acc([r for r in rows if r["method"] == m]) for m in methods}
    best_fixed = max(fixed, key=lambda m: (pooled[m]["correct"], -fixed.index(m))) if fixed else None
    routes: dict[str, dict[str, int]] = {}
    for r in rows:
        if r["method"] in LEARNED and r.get("route"):
            by = routes.setdefault(f"{r['method']}|{r['family']}", {})
            by[r["route"]] = by.get(r["route"], 0) + 1
    return {
        "families": families,
        "cells": cells,
        "pooled": pooled,
        "oracle": oracle,
        "best_fixed": best_fixed,
        "routes": routes,
    }


def _pct(cell: dict[str, Any]) -> str:
    if cell.get("accuracy") is None:
        return "-"
    lo, hi = cell["ci"]
    return f"{cell['correct']}/{cell['n']} ({100 * lo:.0f}-{100 * hi:.0f})"


def route_table_markdown(table: dict[str, Any], methods: Sequence[str]) -> str:
    """The route table as Markdown: one row per family, one column per method, then the oracle."""
    head = ["kind", *methods, "oracle router"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for f in table["families"]:
        choice = table["oracle"]["choice"].get(f, "-")
        row = [f, *(_pct(table["cells"][f][m]) for m in methods), choice]
        lines.append("| " + " | ".join(row) + " |")
    pooled = ["all", *(_pct(table["pooled"][m]) for m in methods)]
    o = table["oracle"]
    pooled.append(_pct(o) if o.get("n") else "-")
    lines.append("| " + " | ".join(pooled) + " |")
    tokens = ["tokens/question", *(_num(table["pooled"][m]["tokens_per_question"]) for m in methods), ""]
    lines.append("| " + " | ".join(tokens) + " |")
    out = "\n".join(lines) + "\n"
    out += (
        f"\nBest fixed route overall: {table['best_fixed']}. Oracle router (best fixed route per kind, chosen "
        f"with hindsight from this run): {_pct(o) if o.get('n') else '-'}.\n"
    )
    if table["routes"]:
        out += "\nFirst-plan routes of learned methods, per kind (workers of the plan's steps):\n\n"
        for key, by in sorted(table["routes"].items()):
            method, family = key.split("|")
            shares = ", ".join(f"{route} {n}" for route, n in sorted(by.items(), key=lambda x: -x[1]))
            out += f"- {method}, {family}: {shares}\n"
    return out


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"
