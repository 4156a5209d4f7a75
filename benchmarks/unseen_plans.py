"""First-round plans on benchmarks the retraining loop never trains on (MMLU, HumanEval, MATH-500, AIME 2024):
parse rate with the plan grammar on and off, side by side, for the same Conductor on the same prompts.

    python benchmarks/unseen_plans.py [--n 8] [--pool conductor/config/pools/local.yaml] [--out docs/retraining_cpu]
        [--benchmarks mmlu,aime24]

Plan-only (one Conductor call per prompt, no steps); the served Conductor is the pool's (by default the
shipped adapter, in process). Accuracy on these benchmarks needs whole jobs: `conductor eval -b ... -m conductor`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from conductor.config.pool import load_pool
from conductor.config.settings import Settings
from conductor.inference.gateway import Gateway
from reward_pipeline.training.probe import probe_plans
from reward_pipeline.training.problems import unseen_benchmark_prompts

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=8, help="prompts per benchmark (the first N of each file)")
    ap.add_argument("--pool", type=Path, default=None)
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--out", type=Path, default=None, help="write unseen_plans.json here")
    ap.add_argument("--benchmarks", default=None, help="comma-separated subset of mmlu,humaneval,math500,aime24")
    ap.add_argument("--max-tokens", type=int, default=None, help="cap the Conductor's plan (a smoke run's size)")
    args = ap.parse_args()
    wanted = None if args.benchmarks is None else set(args.benchmarks.split(","))
    settings = Settings()
    by_bench: dict[str, list] = {}
    for name, problem in unseen_benchmark_prompts(args.data, n=args.n):
        if wanted is None or name in wanted:
            by_bench.setdefault(name, []).append(problem)
    pool = load_pool(args.pool)
    if args.max_tokens is not None:
        pool.conductor = pool.conductor.model_copy(update={"max_tokens": args.max_tokens})
    results: dict[str, dict] = {}
    for grammar in (True, False):
        gateway = Gateway(pool, model_home=settings.model_cache, plan_grammar=grammar)
        label = "grammar on" if grammar else "grammar off"
        results[label] = {b: probe_plans(gateway, ps, threads=1).as_dict() for b, ps in by_bench.items()}
    print(
        f"| benchmark (first {args.n}) | "
        + " | ".join(f"parse rate, {k}" for k in results)
        + " | completion tokens (on / off) |"
    )
    print("|---|" + "---|" * (len(results) + 1))
    for b in by_bench:
        on, off = results["grammar on"][b], results["grammar off"][b]
        print(
            f"| {b} | {on['parse_rate']:.2f} ({on['parsed']}/{on['n']}) | {off['parse_rate']:.2f} ({off['parsed']}/{off['n']}) "
            f"| {on['completion_tokens_mean']} / {off['completion_tokens_mean']} |"
        )
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "unseen_plans.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
