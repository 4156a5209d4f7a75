"""The evaluation harness: run benchmarks through the system with the Conductor and baselines.

`run_eval` submits every (method, problem) pair through the one `Service` (same pool, gateway
and queue for every method; methods differ only in job options, see `baselines`), keeps at
most `parallel` jobs in flight, and as each job ends takes its verdict from the rewards the
`conductor.score` task wrote (scoring it inline when the task has not done so within
`score_grace_s`, e.g. when no Celery host consumes the reward queue). One result line per pair is
appended to ``<out>/results.jsonl`` as soon as it is known, so an interrupted run loses at
most the pairs in flight, and a rerun skips every pair already there. At the end it writes
``results.json`` (config, per-cell statistics, pooled statistics), ``report.md`` (Markdown
tables) and two plots (``accuracy_vs_tokens.png``, ``accuracy_by_benchmark.png``).

Benchmarks: ``gsm8k``, ``math500``, ``aime24``, ``mmlu``, ``humaneval``, ``mbpp`` (test split)
from the shared data directory (``$CONDUCTOR_DATA_DIR``, else ``<repo>/../shared/data``), or
the path of any problem file. A user file is JSONL, one problem per line::

    {"id": "q1", "question": "What is 6 * 7?", "answer": "42"}
    {"id": "q2", "question": "Capital of France?", "choices": ["Rome", "Paris"], "answer": "B"}
    {"id": "q3", "question": "Write add(a, b).", "tests": "assert add(1, 2) == 3", "entry_point": "add"}

with optional ``kind`` (math | mc | code | text), ``rubric`` (judged by the LLM judge) and
``metadata``; ids must be unique (they key the resumable results).

`verify_answers` scores answers produced elsewhere (``{"id", "answer"}`` per line) with the
same verifiers.

Eval jobs are ordinary jobs: their Conductor rounds get rewards like production traffic.
Their options carry ``{"eval": {"run": ..., "method": ...}}`` so that a training-data export
can leave benchmark problems out.
"""

from reward_pipeline.evaluation.harness import EvalReport, run_eval
from reward_pipeline.evaluation.output import RESULTS_JSONL, write_report
from reward_pipeline.evaluation.problems import BENCHMARKS, Benchmark, data_dir, load_benchmark
from reward_pipeline.evaluation.verify import VerifyReport, verify_answers
from reward_pipeline.evaluation.voting import majority_vote

__all__ = [
    "BENCHMARKS",
    "RESULTS_JSONL",
    "Benchmark",
    "EvalReport",
    "VerifyReport",
    "data_dir",
    "load_benchmark",
    "majority_vote",
    "run_eval",
    "verify_answers",
    "write_report",
]
