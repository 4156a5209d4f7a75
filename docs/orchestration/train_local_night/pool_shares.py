"""The warm-up's first-round plans rebuilt from recorded route trials, drawn problem first (the code of
c199ca6) and subset first (the code since cbde1ff): how many plans of each kind were shown a pool without
python, and where they went. Run from the repository root:

    git show c199ca6:reward_pipeline/training/routes.py > /tmp/routes_old.py
    gunzip -k docs/orchestration/train_local_night/route_trials.jsonl.gz
    .venv/bin/python docs/orchestration/train_local_night/pool_shares.py \\
        docs/orchestration/train_local_night/route_trials.jsonl /tmp/routes_old.py

The problems are rebuilt as `make train-local` builds them (200 of each kind at seed 0, 200 GSM8K
expressions from ../shared/data), the examples with its settings (1,920, seed 0, a fifth replans)."""

import importlib.util
import sys
from collections import Counter
from pathlib import Path

from conductor.config.pool import load_pool
from reward_pipeline.training import routes as new
from reward_pipeline.training.curriculum import curriculum_expressions, mixed_problems

trials_path, old_path = Path(sys.argv[1]), sys.argv[2]
spec = importlib.util.spec_from_file_location("routes_old", old_path)
assert spec and spec.loader
old = importlib.util.module_from_spec(spec)
sys.modules["routes_old"] = old
spec.loader.exec_module(old)

pool = load_pool(Path("conductor/config/pools/local.yaml"))
problems = mixed_problems(200, seed=0) + curriculum_expressions(Path("../shared/data"), 200)
recorded = new.load_trials(trials_path)
trials = {str(p.id): recorded.get(str(p.id), []) for p in problems}
# A prompt shows the question after "Question: "; its first line names the problem (options may follow).
kind_of = {p.question.strip().split("\n")[0].strip(): str(p.metadata.get("family", "arithmetic")) for p in problems}
python = " ".join(pool.worker("python").description.split())

for label, module in (("problem first (c199ca6)", old), ("subset first (cbde1ff)", new)):
    built = module.build_route_examples(problems, trials, pool, n=1920, max_steps=3, seed=0, replan_share=0.2)
    shown: Counter[tuple[str, str]] = Counter()
    for ex in built.examples:
        prompt = ex["prompt"][1]["content"]
        if "Workflow run:" in prompt:
            continue  # a replan round
        question = prompt.split("Question: ", 1)[1].split("\n")[0].strip()
        lines = [line for line in prompt.splitlines() if line.startswith("Model ")]
        pool_kind = "with python" if any(line.endswith(python) for line in lines) else "without python"
        shown[(kind_of[question], pool_kind)] += 1
    strings = ("letters", "lists", "transform")
    without = sum(shown[(k, "without python")] for k in strings)
    total = without + sum(shown[(k, "with python")] for k in strings)
    print(f"{label}: string plans shown without python {without}/{total} ({100 * without / total:.1f}%)")
    print("  per kind and pool:", dict(sorted(shown.items())))
    print("  routes:", built.stats["routes"])
