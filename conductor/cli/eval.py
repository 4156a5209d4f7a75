"""Reward and evaluation commands: `eval`, `verify`, `feedback`, `score` (registered by cli.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from conductor.cli.common import echo_json, errors_to_exit_codes, load_settings, running_system
from conductor.domain.errors import InputError

BenchmarkOpt = Annotated[
    str,
    typer.Option(
        "--benchmark",
        "-b",
        help="gsm8k, math500, aime24, mmlu, humaneval, mbpp or a problem file; comma-separated for several.",
    ),
]
MethodsOpt = Annotated[
    str,
    typer.Option(
        "--methods",
        "-m",
        help="Comma-separated: conductor, router, single:WORKER, moa[:AGG], self-reflect[:WORKER[:K]], "
        "best-of-n[:WORKER[:N]], tool-route[:WORKER[:TOOL[:N]]].",
    ),
]
OutDirOpt = Annotated[
    Path, typer.Option("--out", "-o", help="Directory for results.jsonl, results.json, report.md, plots.")
]
JudgeOpt = Annotated[str | None, typer.Option(help="Pool worker that judges rubric problems.")]
DataDirOpt = Annotated[Path | None, typer.Option(help="Directory of the benchmark files (default: shared/data).")]


def eval_command(
    benchmark: BenchmarkOpt,
    out: OutDirOpt,
    methods: MethodsOpt = "conductor",
    limit: Annotated[
        int | None, typer.Option("--limit", "-n", min=1, help="First N problems of each benchmark.")
    ] = None,
    parallel: Annotated[int, typer.Option(min=1, help="Jobs in flight at once.")] = 16,
    pool: Annotated[Path | None, typer.Option(help="Worker pool YAML (default: settings).")] = None,
    judge: JudgeOpt = None,
    data_dir: DataDirOpt = None,
    job_timeout: Annotated[float, typer.Option(help="Seconds one job may take before a rerun retries it.")] = 3600.0,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Progress bar on stderr.")] = True,
) -> None:
    """Evaluate the Conductor and baselines on benchmarks; resumable (finished pairs are skipped)."""
    from reward_pipeline.evaluation import load_benchmark, run_eval
    from reward_pipeline.evaluation.baselines import parse_methods
    from reward_pipeline.judge_client import make_judge

    with errors_to_exit_codes():
        benches = [load_benchmark(b, limit=limit, data=data_dir) for b in benchmark.split(",") if b.strip()]
        if not benches:
            raise InputError("no benchmark given")
        with running_system(load_settings(pool_file=pool)) as sysm:
            rt = sysm.runtime
            chosen = parse_methods(methods, rt.pool)
            for b in benches:
                for why in b.rejected[:5]:
                    typer.echo(f"{b.label}: {why}", err=True)
            report = run_eval(
                sysm.service,
                rt.pool,
                benchmarks=benches,
                methods=chosen,
                out=out,
                parallel=parallel,
                job_timeout_s=job_timeout,
                judge=make_judge(rt.settings, rt.pool, rt.gateway, judge),
                progress=progress,
                echo=lambda msg: typer.echo(msg, err=True),
            )
        typer.echo(report.table)
        typer.echo(
            f"{report.submitted} pair(s) run, {report.skipped} already done; report in {report.files['report_md']}",
            err=True,
        )


def verify_command(
    file: Annotated[str, typer.Option("--file", "-f", help="Problem file (any supported format) or benchmark name.")],
    answers: Annotated[
        Path,
        typer.Option("--answers", "-a", exists=True, dir_okay=False, help='JSONL of {"id": ..., "answer": ...} lines.'),
    ],
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write one verdict JSON line per problem here.")
    ] = None,
    judge: JudgeOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Score answers produced elsewhere with the same verifiers; prints accuracy."""
    from reward_pipeline.evaluation import verify_answers
    from reward_pipeline.evaluation.report import wilson_interval

    with errors_to_exit_codes():
        judge_verifier = None
        if judge:
            from conductor.system import runtime_for
            from reward_pipeline.judge_client import make_judge

            rt = runtime_for(load_settings())
            judge_verifier = make_judge(rt.settings, rt.pool, rt.gateway, judge)
        rep = verify_answers(file, answers, judge=judge_verifier, data=data_dir)
        for why in rep.bad_lines[:10]:
            typer.echo(f"skipped: {why}", err=True)
        if rep.unknown_ids:
            typer.echo(
                f"{len(rep.unknown_ids)} answer(s) for ids not in the problem file, e.g. {rep.unknown_ids[:3]}",
                err=True,
            )
        if out:
            out.parent.mkdir(parents=True, exist_ok=True)
            with out.open("w", encoding="utf-8") as fh:
                for line in rep.lines:
                    fh.write(json.dumps(line, default=str) + "\n")
        if rep.accuracy is None:
            typer.echo(f"no problem could be verified ({rep.total} problems, {rep.answered} answered)")
            return
        lo, hi = wilson_interval(rep.correct, rep.scored)
        typer.echo(
            f"accuracy: {rep.correct}/{rep.scored} = {100 * rep.accuracy:.1f}% "
            f"(95% CI {100 * lo:.1f}-{100 * hi:.1f}); {rep.answered} of {rep.total} problems answered"
        )


def feedback_command(
    job_id: Annotated[str, typer.Argument(help="Job id.")],
    score: Annotated[str, typer.Argument(help="A score in [0, 1], a percentage, or up/down, 👍/👎.")],
) -> None:
    """Record a user's judgement of a job's answer as a feedback reward."""
    from reward_pipeline.rewards import record_feedback

    with errors_to_exit_codes(), running_system(load_settings(), needs_worker=False) as sysm:
        row = record_feedback(sysm.service.sessions, job_id, score)
        echo_json(
            {
                "job_id": job_id,
                "value": row.value,
                "correct": row.correct,
                "source": row.source,
                "chain_id": row.chain_id,
                "details": row.details,
            }
        )


def score_command(
    job_id: Annotated[str, typer.Argument(help="Job id.")],
    force: Annotated[bool, typer.Option(help="Replace existing verifier rewards.")] = False,
    judge: JudgeOpt = None,
) -> None:
    """Verify a finished job now and store its rewards (what the `conductor.score` task does)."""
    from reward_pipeline.judge_client import make_judge
    from reward_pipeline.rewards import score_job

    with errors_to_exit_codes(), running_system(load_settings(), needs_worker=False) as sysm:
        rt = sysm.runtime
        rows = score_job(rt.sessions, job_id, judge=make_judge(rt.settings, rt.pool, rt.gateway, judge), force=force)
        echo_json(
            [
                {
                    "chain_id": r.chain_id,
                    "round_id": r.round_id,
                    "value": r.value,
                    "correct": r.correct,
                    "verifier": r.verifier,
                    "reason": (r.details or {}).get("reason"),
                }
                for r in rows
            ]
        )


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_command)
    app.command("verify")(verify_command)
    app.command("feedback")(feedback_command)
    app.command("score")(score_command)
