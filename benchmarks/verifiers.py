"""Verifier accuracy and throughput.

Accuracy: precision and recall of the number, math and multiple-choice verifiers on the labelled
phrasing set (`tests/reward_pipeline/verifiers/phrasings/*.jsonl`: real outputs of the local worker pool on
GSM8K, MATH-500 and MMLU, hand-labelled, plus realistic crafted phrasings over real problems).
Recall is the share of right answers accepted (target >= 97%), "false accept" the share of
wrong answers accepted (target <= 3%).

Throughput: verdicts per second for the math verifier (math-verify in its worker process) and
the code verifier (sandboxed subprocess per answer), run sequentially and with N concurrent
workers (a process pool, like the reward worker's prefork concurrency, and threads in one
process for comparison), over real data: MATH-500 reference answers boxed in a sentence, and
HumanEval canonical solutions.

    python benchmarks/verifiers.py --n 50 [--workers 2] [--data ../shared/data] [--accuracy-only]
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from conductor.domain.problem import Problem
from conductor.sandbox import detect_isolation
from reward_pipeline.verifiers.base import Verifier
from reward_pipeline.verifiers.code_exec import CodeVerifier
from reward_pipeline.verifiers.math_equiv import MathVerifier, MathWorkerPool

Item = tuple[str, str, Problem]  # (verifier kind, answer, problem)

PHRASINGS = ROOT / "tests" / "reward_pipeline" / "verifiers" / "phrasings"
PHRASING_KINDS = ("number", "math", "mc")


def load_phrasings(kind: str) -> list[dict]:
    """The labelled phrasings for one verifier: text, reference, expected (+ question, choices)."""
    with (PHRASINGS / f"{kind}.jsonl").open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def phrasing_problem(kind: str, row: dict) -> Problem:
    return Problem(question=row.get("question") or "?", answer=row["reference"], choices=row.get("choices"),
                   kind="mc" if kind == "mc" else "math")  # fmt: skip


def phrasing_scores(kind: str, verifier: Verifier | None = None) -> dict:
    """Confusion counts, precision, recall and false-accept rate of one verifier on its set,
    with the rows it got wrong."""
    from reward_pipeline.verifiers import MathVerifier, MultipleChoiceVerifier, NumberVerifier

    check: Verifier = verifier or {"number": NumberVerifier, "math": MathVerifier, "mc": MultipleChoiceVerifier}[kind]()
    counts = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
    misses = []
    for row in load_phrasings(kind):
        verdict = check.verify(row["text"], phrasing_problem(kind, row))
        key = ("t" if verdict.correct == row["expected"] else "f") + ("p" if verdict.correct else "n")
        counts[key] += 1
        if verdict.correct != row["expected"]:
            misses.append({"text": row["text"][:160], "reference": row["reference"], "reason": verdict.reason})
    tp, fp, fn, tn = counts["tp"], counts["fp"], counts["fn"], counts["tn"]
    return counts | {
        "n": tp + fp + fn + tn,
        "real": sum(1 for row in load_phrasings(kind) if not row["source"].startswith("crafted")),
        "precision": tp / (tp + fp) if tp + fp else 1.0,
        "recall": tp / (tp + fn) if tp + fn else 1.0,
        "false_accept": fp / (fp + tn) if fp + tn else 0.0,
        "misses": misses,
    }


def print_accuracy() -> bool:
    header = (
        f"{'verifier':<10}{'n':>6}{'real':>6}{'right':>7}{'wrong':>7}{'precision':>11}{'recall':>8}{'false acc.':>12}"
    )
    print(header)
    print("-" * len(header))
    ok = True
    for kind in PHRASING_KINDS:
        r = phrasing_scores(kind)
        ok &= r["recall"] >= 0.97 and r["false_accept"] <= 0.03
        print(f"{kind:<10}{r['n']:>6}{r['real']:>6}{r['tp'] + r['fn']:>7}{r['fp'] + r['tn']:>7}"
              f"{r['precision']:>10.1%}{r['recall']:>8.1%}{r['false_accept']:>11.1%}")  # fmt: skip
        for miss in r["misses"]:
            print(f"    missed: {miss['text']!r} (reference {miss['reference']}): {miss['reason']}")
    print("targets: recall >= 97%, false accept <= 3%\n")
    return ok


def load_math(data: Path, n: int) -> list[Item]:
    with (data / "math500_test.jsonl").open(encoding="utf-8") as f:
        rows = [json.loads(line) for line in f][:n]
    return [
        ("math", f"So the final answer is $\\boxed{{{r['answer']}}}$.", Problem(question=r["problem"], answer=r["answer"], kind="math"))
        for r in rows
    ]  # fmt: skip


def load_code(data: Path, n: int) -> list[Item]:
    with gzip.open(data / "HumanEval.jsonl.gz", "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f][:n]
    return [
        ("code", r["canonical_solution"], Problem(id=r["task_id"], question=r["prompt"], kind="code",
                                                  tests=r["test"], entry_point=r["entry_point"]))
        for r in rows
    ]  # fmt: skip


# One verifier of each kind per process; each process gets its own single math worker, the way
# a prefork reward worker would.
_verifiers: dict[str, object] = {}


def _init_process() -> None:
    _verifiers["math"] = MathVerifier(pool=MathWorkerPool(size=1))
    _verifiers["code"] = CodeVerifier()
    _verifiers["math"].pool.warm(1)  # type: ignore[attr-defined]
    detect_isolation()


def _verify(item: Item) -> bool:
    kind, answer, problem = item
    return _verifiers[kind].verify(answer, problem).correct  # type: ignore[attr-defined]


def _ready(_: int) -> int:
    time.sleep(0.3)  # long enough that every pool process has to start and initialise
    return os.getpid()


def timed(fn: Callable[[], list[bool]]) -> tuple[float, list[bool]]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def run(items: list[Item], workers: int) -> dict[str, float | bool]:
    # sequential, in this process (verifiers warmed first: startup is not throughput)
    seq_s, seq_ok = timed(lambda: [_verify(it) for it in items])
    # threads in this process sharing one math pool of `workers` children
    kind = items[0][0]
    math_pool = MathWorkerPool(size=workers) if kind == "math" else None
    shared: Verifier = MathVerifier(pool=math_pool) if math_pool else CodeVerifier()
    if math_pool:
        math_pool.warm(workers)
    with ThreadPoolExecutor(workers) as ex:
        thr_s, thr_ok = timed(lambda: list(ex.map(lambda it: shared.verify(it[1], it[2]).correct, items)))
    if math_pool:
        math_pool.close()
    # a process pool of `workers`, each process warmed before the clock starts
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_process) as ex:
        list(ex.map(_ready, range(workers * 2)))
        proc_s, proc_ok = timed(lambda: list(ex.map(_verify, items, chunksize=1)))
    n = len(items)
    return {
        "seq": n / seq_s,
        "proc": n / proc_s,
        "thr": n / thr_s,
        "all_correct": all(seq_ok) and all(proc_ok) and all(thr_ok),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=50, help="items per verifier")
    ap.add_argument("--workers", type=int, default=2, help="concurrent workers")
    ap.add_argument(
        "--data", type=Path, default=Path(os.environ.get("CONDUCTOR_DATA_DIR", ROOT.parent / "shared" / "data"))
    )
    ap.add_argument("--accuracy-only", action="store_true", help="only the phrasing-set precision/recall")
    args = ap.parse_args(argv)
    accurate = print_accuracy()
    if args.accuracy_only:
        return 0 if accurate else 1

    iso = detect_isolation()
    print(f"sandbox: mode={iso.mode} network_isolated={iso.network} pid_ns={iso.pid_namespace} "
          f"private_tmp={iso.private_tmp} drops_uid={iso.drops_uid} python={iso.python} ({iso.python_version})")  # fmt: skip
    print(f"cpus={os.cpu_count()} n={args.n} workers={args.workers}\n")
    _init_process()
    w = args.workers
    header = (f"{'verifier':<10}{'n':>5}{'sequential/s':>14}{f'procs({w})/s':>14}{'speedup':>9}"
              f"{f'threads({w})/s':>16}{'speedup':>9}  all correct")  # fmt: skip
    print(header)
    print("-" * len(header))
    ok = True
    for name, loader in (("math", load_math), ("code", load_code)):
        items = loader(args.data, args.n)
        r = run(items, args.workers)
        ok &= bool(r["all_correct"])
        print(f"{name:<10}{len(items):>5}{r['seq']:>14.1f}{r['proc']:>14.1f}{r['proc'] / r['seq']:>8.2f}x"
              f"{r['thr']:>16.1f}{r['thr'] / r['seq']:>8.2f}x  {r['all_correct']}")  # fmt: skip
    return 0 if ok and accurate else 1


if __name__ == "__main__":
    raise SystemExit(main())
