"""The harness loop: submit every (benchmark problem, method) pair through the one `Service`, keep
at most `parallel` jobs in flight, and append each pair's result line as soon as it is known."""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from conductor.app.service import JobSpec, Service
from conductor.config.pool import Pool
from conductor.domain.errors import VerifierError
from conductor.domain.problem import Problem
from conductor.store import queries
from conductor.store.models import Job, Step
from reward_pipeline.evaluation.baselines import Method
from reward_pipeline.evaluation.output import RESULTS_JSONL, write_report
from reward_pipeline.evaluation.problems import Benchmark
from reward_pipeline.evaluation.voting import majority_vote
from reward_pipeline.rewards import score_job
from reward_pipeline.verifiers import Verifier, verifier_for


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

    def timed_out_record(self) -> dict[str, str]:
        return {
            "benchmark": self.benchmark,
            "method": self.method.label,
            "problem_id": str(self.problem.id),
            "job_id": self.job_id,
        }


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
    service: Service,
    pool: Pool,
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
    bar = tqdm(
        total=len(pairs),
        initial=skipped,
        desc="eval",
        unit="pair",
        file=sys.stderr,
        disable=not progress,
        dynamic_ncols=True,
    )
    driver = _Driver(service, run_id, out, judge, bar, parallel, job_timeout_s, score_grace_s, poll_s)
    with results_path.open("a", encoding="utf-8") as sink:
        if results_path.stat().st_size and not results_path.read_bytes().endswith(b"\n"):
            sink.write("\n")  # end the line an interrupted run cut short, or the next record joins it
        driver.run(todo, done, sink)
    bar.close()
    timed_out = driver.timed_out
    if timed_out and echo:
        echo(f"{len(timed_out)} job(s) did not finish within {job_timeout_s:g}s; a rerun retries them")
    records = [done[p.key] for p in pairs if p.key in done]
    report = write_report(
        (pool, service.settings),
        out,
        records,
        benchmarks=benchmarks,
        methods=methods,
        extra={"run": run_id, "submitted": len(todo), "skipped": skipped, "timed_out": timed_out},
    )
    return EvalReport(out, report["summary"], report["table"], len(todo), skipped, timed_out, report["files"])


@dataclass
class _Driver:
    """Keeps at most `parallel` jobs in flight until every pair has a result line or timed out."""

    service: Service
    run_id: str
    out: Path
    judge: Verifier | None
    bar: Any  # tqdm
    parallel: int
    job_timeout_s: float
    score_grace_s: float
    poll_s: float
    timed_out: list[dict[str, str]] = field(default_factory=list)

    def run(self, todo: list[_Pair], done: dict[tuple[str, str, str], dict[str, Any]], sink: IO[str]) -> None:
        queue = list(reversed(todo))
        inflight: dict[str, _Pair] = {}
        while queue or inflight:
            while queue and len(inflight) < self.parallel:
                pair = _submit(self.service, queue.pop(), self.run_id, self.out)
                inflight[pair.job_id] = pair
            finished = _poll(self.service.sessions, inflight, self.score_grace_s)
            for job_id in _expired(inflight, finished, self.job_timeout_s):
                self.timed_out.append(inflight.pop(job_id).timed_out_record())
                self.bar.update(1)
            for job_id in finished:
                pair = inflight.pop(job_id)
                line = _finish(self.service.sessions, pair, self.judge)
                done[pair.key] = line
                sink.write(json.dumps(line) + "\n")
                sink.flush()
                self.bar.update(1)
                self.bar.set_postfix_str(f"{pair.method.label} {pair.problem.id}: {_mark(line['correct'])}")
            if not finished:
                time.sleep(self.poll_s)


def _submit(service: Service, pair: _Pair, run_id: str, out: Path) -> _Pair:
    """Submit one pair's job, tagged as evaluation so trace export leaves it out."""
    args = pair.method.job_args(pair.problem)
    args["options"] = {**args["options"], "eval": {"run": run_id, "method": pair.method.label}}
    # Keyed on the output folder and the pair: a rerun after an interruption picks up
    # the job it had already submitted (running or done) instead of submitting twice.
    key = hashlib.sha256(f"{out.resolve()}|{'|'.join(pair.key)}".encode()).hexdigest()[:40]
    pair.job_id, _ = service.submit(pair.problem, JobSpec(idempotency_key=f"eval:{key}", **args))
    pair.submitted_at = time.monotonic()
    return pair


def _expired(inflight: dict[str, _Pair], finished: list[str], job_timeout_s: float) -> list[str]:
    """Jobs in flight past their timeout (a rerun retries them)."""
    now = time.monotonic()
    return [j for j, p in inflight.items() if j not in finished and now - p.submitted_at > job_timeout_s]


def _mark(correct: bool | None) -> str:
    return "ok" if correct else "wrong" if correct is False else "?"


def _poll(sessions: sessionmaker[Session], inflight: dict[str, _Pair], grace_s: float) -> list[str]:
    """Jobs whose result is ready: ended, and scored (or not verifiable, or the grace ran out)."""
    if not inflight:
        return []
    ids = list(inflight)
    with sessions() as s:
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


def _finish(sessions: sessionmaker[Session], pair: _Pair, judge: Verifier | None) -> dict[str, Any]:
    error = None
    if pair.verifiable:
        try:
            score_job(sessions, pair.job_id, judge=judge)  # no-op when the score task already did it
        except VerifierError as exc:
            error = f"verifier error: {exc}"
    return _result_line(sessions, pair.job_id, pair.method, pair.problem, pair.benchmark, error)


# -- one finished job -> one result line ------------------------------------------------------
def _result_line(
    sessions: sessionmaker[Session],
    job_id: str,
    method: Method,
    problem: Problem,
    benchmark: str,
    score_error: str | None,
) -> dict[str, Any]:
    with sessions() as s:
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
        family = problem.metadata.get("family")
        if family:
            line["family"] = str(family)
        line.update(_routes(s, chains))
        return line


def _routes(s: Session, chains: list[Any]) -> dict[str, Any]:
    """The first sample's route: the workers of its first plan, in step order, and the kinds of its rounds
    (a replan that corrected it, a fallback that answered again)."""
    if not chains or not chains[0].rounds:
        return {}
    rounds = sorted(chains[0].rounds, key=lambda r: r.round_index)
    first = rounds[0]
    workers = s.scalars(select(Step.worker_name).where(Step.round_id == first.id).order_by(Step.step_index)).all()
    return {
        "route": ">".join(workers) if workers else None,
        "rounds": [str(r.kind.value if hasattr(r.kind, "value") else r.kind) for r in rounds],
    }
