"""The `conductor` command line: thin commands over the service layer."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from conductor.cli import common, marks
from conductor.cli.common import echo_json, errors_to_exit_codes, load_settings, running_system
from conductor.domain.errors import InputError

if TYPE_CHECKING:
    from conductor.system import System

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__, pretty_exceptions_show_locals=False)
traces_app = typer.Typer(no_args_is_help=True, help="Conductor traces for GRPO training.")
app.add_typer(traces_app, name="traces")


@app.callback()
def _options(debug: bool = typer.Option(False, "--debug", help="Show the full traceback of an error.")) -> None:
    common.DEBUG = debug


def _workflow_lines(view: dict) -> list[str]:
    lines = []
    for chain in view["chains"]:
        if chain["parent_step_id"] is not None:
            continue
        previous = None
        for rnd in chain["rounds"]:
            head = f"  sample {chain['sample']} round {rnd['index']} ({rnd['kind']}): {rnd['status']}"
            if rnd["parse_error"]:
                head += f" - {rnd['parse_error']}"
            elif rnd["kind"] == "fallback" and previous is not None and previous["status"] == "done":
                head += f" - the plan's answer {previous['answer'][:40]!r} was a tool miss"
            lines.append(head)
            previous = rnd
            for st in rnd["steps"]:
                access = st["access"] if st["access"] == "all" else list(st["access"])
                lines.append(f"    step {st['index']} [{st['worker']}] access={access}: {st['subtask'][:90]!r}")
    return lines


@app.command()
def solve(
    question: str = typer.Argument(..., help="The problem to solve."),
    answer: str | None = typer.Option(None, help="Reference answer, if known (enables scoring)."),
    samples: int | None = typer.Option(None, help="Workflows to sample for this problem (G)."),
    timeout: float = typer.Option(1800, help="Seconds to wait for the result."),
    budget_tokens: int | None = typer.Option(None, help="Stop the job (budget_exceeded) past this many tokens."),
    budget_usd: float | None = typer.Option(None, help="Stop the job (budget_exceeded) past this cost."),
    as_json: bool = typer.Option(False, "--json", help="Print the whole job as JSON."),
    effort: str | None = typer.Option(None, help="low, medium or high: steps, replans and samples."),
) -> None:
    """Run one problem through the pipeline and print the result."""
    from conductor.app.service import JobSpec
    from conductor.domain.inputs import build_problem

    with errors_to_exit_codes():
        problem = build_problem(question=question, answer=answer)  # before any service starts
    with errors_to_exit_codes(), running_system(load_settings()) as sysm:
        started = time.monotonic()
        job_id, _ = sysm.service.submit(
            problem,
            JobSpec(samples=samples, budget_tokens=budget_tokens, budget_usd=budget_usd).with_knob(effort),
        )
        sysm.service.wait([job_id], timeout=timeout)
        view = sysm.service.job(job_id)
        unreachable = common.UnreachableFailures()
        unreachable.add(view)
        if as_json:
            echo_json(view)
        elif not unreachable or common.DEBUG:  # an unreachable server: its one line says it all
            typer.echo(
                f"job {job_id}: {view['status']} in {time.monotonic() - started:.1f}s, "
                f"{view['tokens']} tokens, ${view['cost_usd']:.6f}"
            )
            typer.echo("\n".join(_workflow_lines(view)))
            typer.echo(f"answer: {view['answer'] if view['answer'] is not None else '-'}")
            if answer is not None:
                verdict = marks.verdict(sysm.service.sessions, job_id)
                typer.echo(f"reference: {answer} -> {verdict.mark}")
            if view["error"]:
                typer.echo(f"error: {view['error']}")
        unreachable.exit_if_any()


def _print_estimate(file: Path, format: str | None, limit: int | None, effort: str | None, samples: int | None) -> None:
    """`conductor run --estimate`: the file's well-formed problems priced; nothing is submitted."""
    import itertools

    from conductor.app.estimate import estimate
    from conductor.domain.inputs import read_problems
    from conductor.domain.problem import Problem
    from conductor.system import runtime_for

    with errors_to_exit_codes():
        runtime = runtime_for(load_settings())
        try:
            items = itertools.islice(read_problems(file, format=format), limit)
            problems = [p for _, p in items if isinstance(p, Problem)]
            report = estimate(
                runtime.sessions, runtime.pool, runtime.settings, problems, effort=effort, samples=samples
            )
        finally:
            runtime.close()
        typer.echo(json.dumps(report, indent=2))


@app.command()
def retry(
    batch_id: str = typer.Argument(..., help="A batch that has ended (`conductor run` or the Batch API)."),
    out: Path | None = typer.Option(None, help="Result JSONL of the retried lines (`conductor run` batches)."),
    timeout: float | None = typer.Option(None, help="Give up following after this many seconds."),
) -> None:
    """Run only the failed lines of a batch again, as a new batch linked to the old one."""
    from conductor.app.batches.batch_api import Batches
    from conductor.app.batches.repair import failed_problems_file, retry_failed
    from conductor.store.models import Batch

    settings = load_settings()
    with errors_to_exit_codes(), running_system(settings) as sysm:
        batches = Batches(sysm.service)
        with batches.sessions() as s:
            old = s.get(Batch, batch_id)
            tenant = old.tenant_id if old is not None and old.status is not None else None
        if tenant is not None:  # a Batch API batch: the CLI acts for the batch's own tenant
            new = retry_failed(batches, tenant, batch_id)
            typer.echo(new.id)
            typer.echo(f"batch {new.id} retries the failed lines of {batch_id} (metadata.retry_of)", err=True)
            return
        problems = settings.home / "retries" / f"retry-of-{batch_id}.jsonl"
        n = failed_problems_file(batches, batch_id, problems)
    typer.echo(f"retrying {n} failed line(s) of {batch_id} from {problems}", err=True)
    run(file=problems, out=out, format="jsonl", limit=None, samples=None, timeout=timeout, budget_tokens=None,
        budget_usd=None, show_workflows=False, effort=None, estimate=False)  # fmt: skip


@app.command()
def run(
    file: Path = typer.Argument(..., exists=True, dir_okay=False, help="Problems: JSONL or a benchmark file."),
    out: Path | None = typer.Option(None, help="Result JSONL (default: stdout)."),
    format: str | None = typer.Option(None, "--format", help="jsonl, gsm8k, math500, aime24, mmlu, humaneval, mbpp"),
    limit: int | None = typer.Option(None, help="Only the first N problems."),
    samples: int | None = typer.Option(None, help="Workflows sampled per problem (G)."),
    timeout: float | None = typer.Option(None, help="Give up following after this many seconds."),
    budget_tokens: int | None = typer.Option(None, help="Per-job token budget."),
    budget_usd: float | None = typer.Option(None, help="Per-job cost budget (USD)."),
    show_workflows: bool = typer.Option(False, help="Print each problem's workflow to stderr as it finishes."),
    effort: str | None = typer.Option(None, help="low, medium or high: steps, replans and samples per problem."),
    estimate: bool = typer.Option(False, "--estimate", help="Print expected calls, tokens and USD; run nothing."),
) -> None:
    """Submit a batch and follow it to the end with a progress bar; one JSON result line per problem."""
    from tqdm import tqdm

    from conductor.app.service import JobSpec

    if estimate:
        _print_estimate(file, format, limit, effort, samples)
        return

    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)  # fail before running, not after
        out.touch()
    with errors_to_exit_codes(), running_system(load_settings()) as sysm:
        # Streamed: the file is read and inserted in chunks, jobs enter the broker as the
        # cluster has room (the feeder), and no list of job ids is held (100k-problem batches).
        report = sysm.service.submit_batch(
            file,
            JobSpec(samples=samples, budget_tokens=budget_tokens, budget_usd=budget_usd).with_knob(effort),
            format=format,
            limit=limit,
            keep_ids=False,
        )
        for bad in report.rejected:
            typer.echo(f"line {bad['line']}: rejected: {bad['error']}", err=True)
        bar = tqdm(total=None, desc=f"batch {report.batch_id[:8]}", unit="job", file=sys.stderr)

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        sysm.service.wait_batch(report.batch_id, timeout=timeout, on_progress=progress)
        bar.close()
        sink = out.open("w") if out else sys.stdout
        unreachable = common.UnreachableFailures()
        board = marks.Scoreboard()
        try:
            for line in sysm.service.batch_result_lines(report.batch_id):
                verdict = marks.verdict(sysm.service.sessions, line["job_id"])
                board.add(verdict)
                sink.write(json.dumps(marks.annotate(line, verdict)) + "\n")
                unreachable.add(line)
                if show_workflows:
                    view = sysm.service.job(line["job_id"])
                    checked = (
                        "" if verdict.reference is None else f" -> {verdict.mark} (reference: {verdict.reference})"
                    )
                    typer.echo(
                        f"[{line['id']}] {line['status']} in {line['seconds']}s, {line['tokens']} tokens: "
                        f"{str(line['answer'])[:160]!r}{checked}",
                        err=True,
                    )
                    typer.echo("\n".join(_workflow_lines(view)), err=True)
        finally:
            if out:
                sink.close()
        if board.line():
            typer.echo(board.line(), err=True)
        usage = sysm.service.usage(batch_id=report.batch_id)
        typer.echo(
            f"batch {report.batch_id}: {usage['by_status']}, {usage['prompt_tokens'] + usage['completion_tokens']} "
            f"tokens, ${usage['cost_usd']:.6f}, {len(report.rejected)} line(s) rejected",
            err=True,
        )
        unreachable.exit_if_any()


@app.command()
def status(job_id: str | None = typer.Argument(None, help="Job id; without it, the cluster's health.")) -> None:
    """Show a job with its rounds, steps and rewards; without a job id, whether beat, reaper,
    queues and scoring are healthy (warnings on stderr)."""
    with errors_to_exit_codes(), running_system(load_settings(), needs_worker=False) as sysm:
        if job_id is not None:
            echo_json(sysm.service.job(job_id))
            return
        report = cluster_status(sysm)
        echo_json(report)
        for warning in report["warnings"]:
            typer.echo(f"warning: {warning}", err=True)


def cluster_status(sysm: System) -> dict:
    """Beat heartbeat, reaper age, queue depths and consumers, and jobs waiting for a score."""
    from reward_pipeline.rewards import unscored_jobs
    from tasks.app import QUEUES

    settings = sysm.settings
    waiting = len(unscored_jobs(sysm.service.sessions, older_than_s=settings.ready_grace_s))
    report: dict = {"broker": common.redact_url(settings.broker_url), "database": common.redact_url(settings.db_url)}
    if settings.cluster_redis_url is None:
        report |= {"mode": "embedded (the in-process worker runs the reaper; no beat needed)", "warnings": []}
    else:
        from schedulers import health

        report |= health.redis_health(
            settings.cluster_redis_url,
            reaper_interval_s=settings.reaper_interval_s,
            queues=QUEUES,
            links=settings.links,
        )
        consumers = health.consumers(sysm.app)
        report["consumers"] = consumers
        if consumers is None:
            report["warnings"].append("no worker answered: start `conductor worker` processes for every queue")
        else:
            idle = [q for q in QUEUES if q not in consumers and (q != "train" or report["queue_depth"].get(q))]
            if idle:
                report["warnings"].append(f"no worker consumes {', '.join(idle)}: add them to some worker's -Q")
    report["jobs_waiting_for_score"] = waiting
    if waiting:
        report["warnings"].append(
            f"{waiting} finished job(s) have waited over {settings.ready_grace_s:g}s for a score: "
            "is a worker consuming the `reward` queue (`conductor worker -Q reward`)?"
        )
    return report


@app.command()
def usage(
    batch: str | None = typer.Option(None, help="Only this batch."),
    tenant: str | None = typer.Option(None, help="Only this tenant (its name or id)."),
) -> None:
    """Jobs, tokens, model calls and cost, summed over a batch, a tenant, or everything."""
    from conductor.app.tenants import tenant_id

    with errors_to_exit_codes(), running_system(load_settings(), needs_worker=False) as sysm:
        who = tenant_id(sysm.service.sessions, tenant) if tenant is not None else None
        echo_json(sysm.service.usage(batch_id=batch, tenant_id=who))


@traces_app.command("export")
def traces_export(
    out: Path = typer.Option(..., help="JSONL file to write."),
    include_eval: bool = typer.Option(False, help="Also export rounds of `conductor eval` jobs."),
) -> None:
    """One line per Conductor round: prompt, completion, token ids, logprobs, policy, steps, answer, reward."""
    with errors_to_exit_codes(), running_system(load_settings(), needs_worker=False) as sysm:
        n = sysm.service.export_traces(out, include_eval=include_eval)
        typer.echo(f"wrote {n} rounds to {out}", err=True)


@app.command()
def worker(
    queues: str = typer.Option("conductor,llm,reward,default", "-Q", "--queues", help="Queues to consume."),
    concurrency: int | None = typer.Option(
        None,
        "-c",
        "--concurrency",
        help="Model calls in flight in this process (threads pool: plus CONDUCTOR_SPARE_THREAD_SHARE spare threads).",
    ),
    pool: str | None = typer.Option(None, "-P", "--pool", help="threads, prefork, solo, gevent"),
    loglevel: str = typer.Option("INFO", "-l", "--loglevel"),
    hostname: str | None = typer.Option(None, "-n", "--hostname"),
) -> None:
    """Run a Celery worker process (production: Redis broker, PostgreSQL store)."""
    from conductor.system import celery_app as build_celery_app

    with errors_to_exit_codes():
        settings = load_settings()
        if settings.embedded:
            raise InputError("a separate worker needs a real broker: set CONDUCTOR_BROKER_URL=redis://...")
        pool_kind = pool or settings.worker_pool
        slots = concurrency or settings.worker_concurrency
        threads = slots
        if pool_kind == "threads" and settings.call_slots is None:
            # -c is the model calls in flight; spare threads prepare the next step meanwhile.
            threads = settings.worker_threads(slots)
            settings = settings.model_copy(update={"call_slots": slots})
        celery_app = build_celery_app(settings)
        _warn_if_nobody_scores(celery_app, queues)
        _log_litellm_once()
        argv = [
            "worker",
            "-Q",
            queues,
            "-l",
            loglevel,
            "-P",
            pool_kind,
            "-c",
            str(threads),
        ]
        if hostname:
            argv += ["-n", hostname]
        celery_app.worker_main(argv)


def _log_litellm_once() -> None:
    """litellm's loggers carry their own stream handler and also propagate to the root logger
    Celery configures, so every model call was printed twice: keep only Celery's handler.

    Below DEBUG, litellm's two INFO lines per model call ("LiteLLM completion() ...", "Wrapper:
    Completed Call ...") are dropped too: they said nothing the task's own lines do not, and
    formatting them was a few percent of a worker's time. Its warnings and errors still show.
    """
    from celery.signals import after_setup_logger

    def drop_litellm_handler(loglevel: int | str | None = None, **_: object) -> None:
        import logging

        from litellm import _logging as litellm_logging

        quiet = logging.getLevelName(loglevel) if isinstance(loglevel, str) else (loglevel or logging.INFO)
        for logger in (litellm_logging.verbose_logger, litellm_logging.verbose_router_logger,
                       litellm_logging.verbose_proxy_logger):  # fmt: skip
            logger.removeHandler(litellm_logging.handler)
            if isinstance(quiet, int) and quiet > logging.DEBUG:
                logger.setLevel(logging.WARNING)

    after_setup_logger.connect(drop_litellm_handler, weak=False)


def _warn_if_nobody_scores(celery_app: object, queues: str) -> None:
    """A cluster in which no worker consumes `reward` never scores a job: say so at start."""
    if "reward" in queues.split(","):
        return
    from schedulers.health import consumers

    others = consumers(celery_app, timeout_s=1.0) or {}
    if "reward" not in others:
        typer.echo(
            "warning: no running worker consumes the `reward` queue and this one will not: finished jobs "
            "will not be scored until one does (`conductor worker -Q reward`)",
            err=True,
        )


@app.command()
def beat(loglevel: str = typer.Option("INFO", "-l", "--loglevel")) -> None:
    """Run the periodic scheduler (reaper, retrain trigger). Run exactly one."""
    from conductor.system import celery_app
    from schedulers.beat import run_beat

    with errors_to_exit_codes():
        settings = load_settings()
        run_beat(celery_app(settings), settings, loglevel=loglevel)


def _register_subcommands() -> None:
    # Imported here, not at the top: these modules import this one's helpers.
    from conductor.cli import eval as cli_eval
    from conductor.cli import models as cli_models
    from conductor.cli import serve as cli_serve

    app.add_typer(cli_models.app, name="models")
    app.command("serve")(cli_serve.serve_command)
    cli_eval.register(app)
    from conductor.cli import train as cli_train

    cli_train.register(app)
    from conductor.cli import api as cli_api

    cli_api.register(app)
    from conductor.cli import tenants as cli_tenants

    cli_tenants.register(app)
    from conductor.cli import mcp_serve as cli_mcp

    app.add_typer(cli_mcp.app, name="mcp")


_register_subcommands()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
