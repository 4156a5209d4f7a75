"""Does the Conductor read the pool it is given? First-round plans on held-out mixed questions for the
bundled pool and for that pool with workers removed (ids renumbered as any deployment's pool would be).

    python benchmarks/pool_routes.py [--n 5] [--pool conductor/config/pools/local.yaml] [--out docs/orchestration]
        [--questions reward_pipeline/evaluation/data/mixed_validation.jsonl]

(`--questions` the validation file to compare candidates without spending the held-out file.)

For each pool variant and each kind of question: the share of first plans per route (the workers of the
plan's steps, by name) and the parse rate under the production grammar. Plan-only (one Conductor call
per question, no steps), in process, as a fresh checkout serves the shipped adapter.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from conductor.config.pool import Pool, load_pool
from conductor.config.settings import Settings
from conductor.domain.errors import PlanParseError
from conductor.domain.inputs import read_problems
from conductor.domain.problem import Problem
from conductor.inference.gateway import Gateway
from reward_pipeline.training.probe import first_plan

HELDOUT = Path(__file__).resolve().parents[1] / "reward_pipeline" / "evaluation" / "data" / "mixed_heldout.jsonl"
VARIANTS = {
    "full pool": (),
    "without calculator": ("calculator",),
    "without python": ("python",),
    "without tools": ("calculator", "python"),
}


def without(pool: Pool, names: tuple[str, ...]) -> Pool:
    workers = [w for w in pool.workers if w.name not in names]
    fallback = pool.fallback_worker if pool.fallback_worker not in names else None
    return pool.model_copy(update={"workers": workers, "fallback_worker": fallback})


def first_plans(pool: Pool, problems: list[Problem], settings: Settings) -> list[dict]:
    gateway = Gateway(pool, model_home=settings.model_cache, plan_grammar=True)
    out = []
    for p in problems:
        plan, tokens = first_plan(gateway, p, max_steps=settings.max_steps)
        route = (
            "unparsed"
            if isinstance(plan, PlanParseError)
            else ">".join(pool.workers[s.worker].name for s in plan.steps)
        )
        out.append({"id": p.id, "family": p.metadata.get("family"), "route": route, "tokens": tokens})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5, help="questions of each kind (the first N of the file)")
    ap.add_argument("--pool", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None, help="write pool_routes.json here")
    ap.add_argument("--max-tokens", type=int, default=None, help="cap the Conductor's plan (a smoke run's size)")
    ap.add_argument("--questions", type=Path, default=HELDOUT, help="a mixed file with metadata.family")
    args = ap.parse_args()
    settings = Settings()
    by_family: dict[str, list[Problem]] = {}
    for _, p in read_problems(args.questions):
        if isinstance(p, Problem):
            fam = str(p.metadata.get("family"))
            if len(by_family.setdefault(fam, [])) < args.n:
                by_family[fam].append(p)
    problems = [p for ps in by_family.values() for p in ps]
    base = load_pool(args.pool)
    if args.max_tokens is not None:
        base.conductor = base.conductor.model_copy(update={"max_tokens": args.max_tokens})
    results: dict[str, list[dict]] = {}
    for label, names in VARIANTS.items():
        results[label] = first_plans(without(base, names), problems, settings)
    print(f"| pool | kind (first {args.n}) | first-plan routes | parsed |")
    print("|---|---|---|---|")
    for label, rows in results.items():
        for fam in by_family:
            mine = [r for r in rows if r["family"] == fam]
            routes = Counter(r["route"] for r in mine)
            shares = ", ".join(f"{k} {v}" for k, v in routes.most_common())
            parsed = sum(1 for r in mine if r["route"] != "unparsed")
            print(f"| {label} | {fam} | {shares} | {parsed}/{len(mine)} |")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "pool_routes.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
