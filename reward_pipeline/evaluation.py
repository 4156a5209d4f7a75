"""The evaluation harness: run benchmarks through the system with the Conductor and baselines.

`run_eval` submits every (method, problem) pair through the one `Service` (same pool, gateway
and queue for every method; methods differ only in job options, see `baselines`), keeps at
most `parallel` jobs in flight, and as each job ends takes its verdict from the rewards the
`conductor.score` task wrote (scoring it inline when the task has not done so within
`score_grace_s`, e.g. when no worker consumes the reward queue). One result line per pair is
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

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from conductor.app.runtime import Runtime
from conductor.app.service import Service
from conductor.domain.errors import InputError, VerifierError
from conductor.domain.inputs import read_problems
from conductor.domain.problem import Problem
from conductor.domain.states import TERMINAL_JOB
from conductor.store import queries
from conductor.store.models import Job, Reward
from reward_pipeline.baselines import Method
from reward_pipeline.report import aggregate, markdown, plot_accuracy_by_benchmark, plot_accuracy_vs_tokens
from reward_pipeline.rewards import score_job
from reward_pipeline.verifiers import Verifier, extract_code, verifier_for

__all__ = [
    "BENCHMARKS",
    "Benchmark",
    "EvalReport",
    "VerifyReport",
    "data_dir",
    "load_benchmark",
    "majority_vote",
    "run_eval",
    "verify_answers",
]

#: name -> (file in the data directory, reader format, only the MBPP test split)
BENCHMARKS: dict[str, tuple[str, str, bool]] = {
    "gsm8k": ("gsm8k_test.jsonl", "gsm8k", False),
    "math500": ("math500_test.jsonl", "math500", False),
    "aime24": ("aime24.jsonl", "aime24", False),
    "mmlu": ("mmlu_test.jsonl.gz", "mmlu", False),
    "humaneval": ("HumanEval.jsonl.gz", "humaneval", False),
    "mbpp": ("mbpp_sanitized.json", "mbpp", True),
}
RESULTS_JSONL = "results.jsonl"
TERMINAL = frozenset(s.value for s in TERMINAL_JOB)


def data_dir() -> Path:
    env = os.environ.get("CONDUCTOR_DATA_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"


@dataclass
class Benchmark:
    label: str
    path: Path
    problems: list[Problem]
    rejected: list[str] = field(default_factory=list)


def load_benchmark(spec: str, *, limit: int | None = None, data: Path | None = None) -> Benchmark:
    """A built-in benchmark by name, or any problem file by path; the first `limit` problems."""
    name = spec.strip()
    if name.lower() in BENCHMARKS:
        file, fmt, test_split = BENCHMARKS[name.lower()]
        path, label = (data or data_dir()) / file, name.lower()
        if not path.exists():
            raise InputError(f"benchmark {label}: {path} not found (set CONDUCTOR_DATA_DIR or pass a file path)")
    else:
        path, fmt, test_split = Path(name), None, False
        if not path.exists():
            raise InputError(f"{name!r} is neither a benchmark ({', '.join(BENCHMARKS)}) nor an existing file")
        label = path.name.split(".")[0]
    problems: list[Problem] = []
    rejected: list[str] = []
    seen: set[str] = set()
    for number, item in read_problems(path, format=fmt, mbpp_test_split=test_split):
        if limit is not None and len(problems) >= limit:
            break
        if isinstance(item, InputError):
            rejected.append(str(item))
            continue
        if item.id in seen:
            rejected.append(f"record {number}: duplicate id {item.id!r}, skipped")
            continue
        seen.add(str(item.id))
        problems.append(item)
    return Benchmark(label, path, problems, rejected)


# -- majority vote (best-of-n) ------------------------------------------------------------
def _vote_key(reward: Reward | None, answer: str, problem: Problem) -> str | None:
    if problem.tests or problem.kind == "code":
        code = extract_code(answer, problem.entry_point)
        return "\n".join(line.rstrip() for line in code.strip().splitlines() if line.strip()) or None
    evidence = (reward.details or {}).get("evidence", {}) if reward is not None else {}
    extracted = evidence.get("extracted")
    if extracted is None:
        return None
    return " ".join(str(extracted).split()).lower()


def majority_vote(samples: list[tuple[int, str, Reward | None]], problem: Problem) -> tuple[int, dict[str, int]]:
    """The index into `samples` ((sample index, answer, chain reward)) that wins the vote, and the tally.

    Votes are the verifier's extraction of each answer (final number, letter, math
    expression; normalised code for code problems); answers with nothing extracted do not
    vote. Ties go to the key first seen in sample order.
    """
    keys = [_vote_key(r, a, problem) for _, a, r in samples]
    tally = Counter(k for k in keys if k is not None)
    if not tally:
        return 0, {}
    best = max(tally.values())
    winner = next(k for k in keys if k is not None and tally[k] == best)
    return keys.index(winner), dict(tally)


# -- one finished job -> one result line ------------------------------------------------------
def _result_line(
    runtime: Runtime, job_id: str, method: Method, problem: Problem, benchmark: str, score_error: str | None
) -> dict[str, Any]:
    with runtime.sessions() as s:
        job = s.get_one(Job, job_id)
        chains = queries.top_chains(job)
        rewards = {r.chain_id: r for r in queries.verifier_rewards(s, job_id, chains_only=True)}
        steps = [r.n_steps for c in chains for r in c.rounds if r.workflow and r.n_steps]
        latency = queries.job_seconds(job)
        answer, chosen = job.answer, rewards.get(job.answer_chain_id)
        votes: dict[str, int] | None = None
        if method.vote:
            done = [(c.sample_index, c.answer, rewards.get(c.id)) for c in chains if c.answer is not None]
            if done:
                i, votes = majority_vote(done, problem)
                answer, chosen = done[i][1], done[i][2]
        # A job that ended without an answer but was scored counts as wrong; an unscored one is unknown.
        correct = bool(chosen.correct) if chosen is not None else (False if rewards else None)
        line = {
            "benchmark": benchmark,
            "method": method.label,
            "problem_id": problem.id,
            "job_id": job_id,
            "status": job.status,
            "correct": correct,
            "reward": chosen.value if chosen is not None else None,
            "verifier": chosen.verifier if chosen is not None else None,
            "reason": (chosen.details or {}).get("reason") if chosen is not None else score_error,
            "answer": None if answer is None else answer[-1000:],
            "tokens": job.prompt_tokens + job.completion_tokens,
            "cost_usd": job.cost_usd,
            "model_calls": job.model_calls,
            "latency_s": latency,
            "steps_per_workflow": sum(steps) / len(steps) if steps else None,
            "workflows": len(steps),
            "error": job.error or score_error,
            "recorded_at": datetime.now(UTC).isoformat(),
        }
        if votes is not None:
            line["votes"] = votes
        return line


# -- the run ------------------------------------------------------------------------------------
@dataclass
class EvalReport:
    out: Path
    summary: dict[str, Any]
    table: str
    submitted: int
    skipped: int
    timed_out: list[dict[str, str]]
    files: dict[str, Path]


@dataclass
class _Pair:
    benchmark: str
    method: Method
    problem: Problem
    verifiable: bool
    job_id: str = ""
    submitted_at: float = 0.0
    ended_at: float | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.benchmark, self.method.label, str(self.problem.id))


def _load_done(path: Path) -> dict[tuple[str, str, str], dict[str, Any]]:
    done: dict[tuple[str, str, str], dict[str, Any]] = {}
    if not path.exists():
        return done
    for raw in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(raw)
            done[(rec["benchmark"], rec["method"], str(rec["problem_id"]))] = rec
        except (ValueError, KeyError, TypeError):
            continue  # a line cut short by an interrupted run: that pair simply runs again
    return done


def run_eval(
    runtime: Runtime,
    service: Service,
    *,
    benchmarks: list[Benchmark],
    methods: list[Method],
    out: Path,
    parallel: int = 16,
    job_timeout_s: float = 3600.0,
    score_grace_s: float = 30.0,
    poll_s: float = 0.25,
    judge: Verifier | None = None,
    progress: bool = True,
    echo: Callable[[str], None] | None = None,
) -> EvalReport:
    """Run every (benchmark problem, method) pair not already in ``out/results.jsonl``; write the report."""
    from tqdm import tqdm

    out.mkdir(parents=True, exist_ok=True)
    results_path = out / RESULTS_JSONL
    done = _load_done(results_path)
    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    pairs = [
        _Pair(b.label, m, p, verifier_for(p, judge=judge) is not None)
        for b in benchmarks
        for p in b.problems
        for m in methods
    ]
    todo = [p for p in pairs if p.key not in done]
    skipped = len(pairs) - len(todo)
    timed_out: list[dict[str, str]] = []
    bar = tqdm(
        total=len(pairs),
        initial=skipped,
        desc="eval",
        unit="pair",
        file=sys.stderr,
        disable=not progress,
        dynamic_ncols=True,
    )
    queue = list(reversed(todo))
    inflight: dict[str, _Pair] = {}
    with results_path.open("a", encoding="utf-8") as sink:
        if results_path.stat().st_size and not results_path.read_bytes().endswith(b"\n"):
            sink.write("\n")  # end the line an interrupted run cut short, or the next record joins it
        while queue or inflight:
            while queue and len(inflight) < parallel:
                pair = _submit(service, queue.pop(), run_id, out)
                inflight[pair.job_id] = pair
            finished = _poll(runtime, inflight, score_grace_s)
            for job_id in _expired(inflight, finished, job_timeout_s):
                pair = inflight.pop(job_id)
                timed_out.append(
                    {
                        "benchmark": pair.benchmark,
                        "method": pair.method.label,
                        "problem_id": str(pair.problem.id),
                        "job_id": job_id,
                    }
                )
                bar.update(1)
            for job_id in finished:
                pair = inflight.pop(job_id)
                line = _finish(runtime, pair, judge)
                done[pair.key] = line
                sink.write(json.dumps(line) + "\n")
                sink.flush()
                bar.update(1)
                bar.set_postfix_str(f"{pair.method.label} {pair.problem.id}: {_mark(line['correct'])}")
            if not finished:
                time.sleep(poll_s)
    bar.close()
    if timed_out and echo:
        echo(f"{len(timed_out)} job(s) did not finish within {job_timeout_s:g}s; a rerun retries them")
    records = [done[p.key] for p in pairs if p.key in done]
    report = write_report(
        runtime,
        out,
        records,
        benchmarks=benchmarks,
        methods=methods,
        extra={"run": run_id, "submitted": len(todo), "skipped": skipped, "timed_out": timed_out},
    )
    return EvalReport(out, report["summary"], report["table"], len(todo), skipped, timed_out, report["files"])


def _submit(service: Service, pair: _Pair, run_id: str, out: Path) -> _Pair:
    """Submit one pair's job, tagged as evaluation so trace export leaves it out."""
    args = pair.method.job_args(pair.problem)
    args["options"] = {**args["options"], "eval": {"run": run_id, "method": pair.method.label}}
    # Keyed on the output folder and the pair: a rerun after an interruption picks up
    # the job it had already submitted (running or done) instead of submitting twice.
    key = hashlib.sha256(f"{out.resolve()}|{'|'.join(pair.key)}".encode()).hexdigest()[:40]
    pair.job_id, _ = service.submit(pair.problem, idempotency_key=f"eval:{key}", **args)
    pair.submitted_at = time.monotonic()
    return pair


def _expired(inflight: dict[str, _Pair], finished: list[str], job_timeout_s: float) -> list[str]:
    """Jobs in flight past their timeout (a rerun retries them)."""
    now = time.monotonic()
    return [j for j, p in inflight.items() if j not in finished and now - p.submitted_at > job_timeout_s]


def _mark(correct: bool | None) -> str:
    return "ok" if correct else "wrong" if correct is False else "?"


def _poll(runtime: Runtime, inflight: dict[str, _Pair], grace_s: float) -> list[str]:
    """Jobs whose result is ready: ended, and scored (or not verifiable, or the grace ran out)."""
    if not inflight:
        return []
    ids = list(inflight)
    with runtime.sessions() as s:
        ended = queries.ended(s, ids)
        scored = queries.scored(s, ended)
    now = time.monotonic()
    ready = []
    for job_id in ids:
        pair = inflight[job_id]
        if job_id not in ended:
            continue
        pair.ended_at = pair.ended_at or now
        if job_id in scored or not pair.verifiable or now - pair.ended_at >= grace_s:
            ready.append(job_id)
    return ready


def _finish(runtime: Runtime, pair: _Pair, judge: Verifier | None) -> dict[str, Any]:
    error = None
    if pair.verifiable:
        try:
            score_job(runtime, pair.job_id, judge=judge)  # no-op when the score task already did it
        except VerifierError as exc:
            error = f"verifier error: {exc}"
    return _result_line(runtime, pair.job_id, pair.method, pair.problem, pair.benchmark, error)


def write_report(
    runtime: Runtime | None,
    out: Path,
    records: list[dict[str, Any]],
    *,
    benchmarks: list[Benchmark],
    methods: list[Method],
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """results.json, report.md and the two plots for `records`."""
    bench_labels = [b.label for b in benchmarks]
    method_labels = [m.label for m in methods]
    summary = aggregate(records, benchmarks=bench_labels, methods=method_labels)
    table = markdown(summary, benchmarks=bench_labels, methods=method_labels)
    files = {
        "results_json": out / "results.json",
        "report_md": out / "report.md",
        "results_jsonl": out / RESULTS_JSONL,
        "accuracy_vs_tokens": plot_accuracy_vs_tokens(summary, out / "accuracy_vs_tokens.png"),
        "accuracy_by_benchmark": plot_accuracy_by_benchmark(
            summary, out / "accuracy_by_benchmark.png", benchmarks=bench_labels, methods=method_labels
        ),
    }
    config: dict[str, Any] = {
        "benchmarks": [
            {"name": b.label, "path": str(b.path), "problems": len(b.problems), "rejected": len(b.rejected)}
            for b in benchmarks
        ],
        "methods": method_labels,
        **(extra or {}),
    }
    if runtime is not None:
        pool, st = runtime.pool, runtime.settings
        config["pool"] = {
            "conductor": pool.conductor.model,
            "policy_version": pool.conductor.policy_version,
            "workers": {w.name: w.model for w in pool.workers},
        }
        config["settings"] = {
            k: getattr(st, k)
            for k in (
                "max_steps",
                "recursion",
                "max_rounds",
                "max_depth",
                "plan_retries",
                "fallback_worker",
                "max_model_calls",
            )
        }
    payload = {
        "config": config,
        "summary": summary,
        "generated_at": datetime.now(UTC).isoformat(),
        "records": len(records),
    }
    files["results_json"].write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")
    files["report_md"].write_text(
        "# Evaluation\n\n"
        f"Benchmarks: {', '.join(f'{b.label} ({len(b.problems)})' for b in benchmarks)}; "
        f"methods: {', '.join(method_labels)}.\n\n{table}\n"
        "![accuracy vs tokens](accuracy_vs_tokens.png)\n\n![accuracy by benchmark](accuracy_by_benchmark.png)\n",
        encoding="utf-8",
    )
    return {"summary": summary, "table": table, "files": files}


# -- verify answers produced elsewhere -------------------------------------------------------
@dataclass
class VerifyReport:
    total: int  #: problems in the file
    answered: int
    scored: int  #: problems a verifier could check
    correct: int
    lines: list[dict[str, Any]]
    unknown_ids: list[str]
    bad_lines: list[str]

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.scored if self.scored else None


def _read_answers(path: Path) -> tuple[dict[str, str], list[str]]:
    answers: dict[str, str] = {}
    bad: list[str] = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
            key, answer = rec["id"], rec["answer"]
        except (ValueError, KeyError, TypeError) as exc:
            bad.append(f'line {number}: expected {{"id", "answer"}}: {exc}')
            continue
        answers.setdefault(str(key), "" if answer is None else str(answer))
    return answers, bad


def verify_answers(
    problems: str | Path,
    answers: Path,
    *,
    judge: Verifier | None = None,
    data: Path | None = None,
    threads: int | None = None,
) -> VerifyReport:
    """Score ``{"id", "answer"}`` lines against a problem file (or benchmark name) with the verifiers.

    A problem with no answer line counts as wrong; answers for unknown ids are listed.
    """
    bench = load_benchmark(str(problems), data=data)
    given, bad = _read_answers(Path(answers))
    known = {str(p.id) for p in bench.problems}

    def one(p: Problem) -> dict[str, Any]:
        pid = str(p.id)
        check = verifier_for(p, judge=judge)
        if check is None:
            return {"id": pid, "correct": None, "verifier": None, "reason": "no verifier for this problem"}
        if pid not in given:
            return {"id": pid, "correct": False, "verifier": check.name, "reason": "no answer given"}
        try:
            v = check.verify(given[pid], p)
        except VerifierError as exc:
            return {"id": pid, "correct": None, "verifier": check.name, "reason": f"verifier error: {exc}"}
        return {"id": pid, "correct": v.correct, "verifier": v.verifier, "reason": v.reason, "details": v.details}

    with ThreadPoolExecutor(max_workers=threads or min(8, os.cpu_count() or 2)) as pool:
        lines = list(pool.map(one, bench.problems))
    scored = [ln for ln in lines if ln["correct"] is not None]
    return VerifyReport(
        total=len(lines),
        answered=sum(1 for p in bench.problems if str(p.id) in given),
        scored=len(scored),
        correct=sum(1 for ln in scored if ln["correct"]),
        lines=lines,
        unknown_ids=sorted(set(given) - known),
        bad_lines=bad + bench.rejected,
    )
