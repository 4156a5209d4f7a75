"""`conductor train ...` and `conductor checkpoints ...`: the retraining pipeline's commands."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import typer

from conductor.cli.common import echo_json, errors_to_exit_codes, load_settings

train_app = typer.Typer(no_args_is_help=True, help="Retrain the Conductor from its traces (GRPO).")
checkpoints_app = typer.Typer(no_args_is_help=True, help="The checkpoint registry: list, show, promote, rollback.")


def _data_dir(value: Path | None) -> Path:
    if value is not None:
        return value
    env = os.environ.get("CONDUCTOR_DATA_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[3] / "shared" / "data"


def _registry():  # type: ignore[no-untyped-def]
    from conductor.runtime import Runtime
    from reward_pipeline.training.checkpoints import Registry

    runtime = Runtime(load_settings())
    return runtime, Registry(runtime.sessions)


@train_app.command("warmup")
def warmup(
    gsm8k: int = typer.Option(200, help="GSM8K train questions to write plans for."),
    arith: int = typer.Option(200, help="Generated arithmetic questions."),
    expressions: int = typer.Option(
        0, help="GSM8K train questions of one or two operations whose expression the calculator verifies."
    ),
    code: int = typer.Option(
        0, help="MBPP code questions from outside its test split (questions no expression answers)."
    ),
    verified_share: float = typer.Option(
        0.0, help="Share of examples with a verified expression that are the one-step calculator plan."
    ),
    examples: int = typer.Option(160, help="Supervised examples (plans) to train on."),
    epochs: float = typer.Option(2.0),
    lr: float = typer.Option(1e-3, help="LoRA learning rate."),
    seed: int = typer.Option(0),
    data_dir: Path | None = typer.Option(None, help="Benchmark data (default: ../shared/data)."),
    promote: bool = typer.Option(False, help="Make the adapter the active Conductor at once (no gate)."),
) -> None:
    """Format warm-up: SFT on synthetic plans the parser accepts; registers a candidate checkpoint."""
    from conductor.inference.local_model import model_dir, pull_default_model
    from reward_pipeline.training.loops.stages import warmup_stage
    from reward_pipeline.training.problems import training_problems
    from reward_pipeline.training.warmup import WarmupConfig

    with errors_to_exit_codes():
        runtime, registry = _registry()
        settings = runtime.settings
        pull_default_model(settings.model_cache)
        problems = training_problems(
            _data_dir(data_dir), gsm8k=gsm8k, arith=arith, seed=seed, expressions=expressions, code=code
        )
        config = WarmupConfig(
            examples=examples, epochs=epochs, learning_rate=lr, seed=seed, verified_share=verified_share
        )
        view = warmup_stage(
            registry=registry,
            pool=runtime.pool,
            problems=problems,
            base_model=model_dir(settings.model_cache),
            home=settings.home,
            config=config,
            max_steps=runtime.pool.step_cap(settings.max_steps),
            provenance={
                "command": "conductor train warmup",
                "gsm8k": gsm8k,
                "arith": arith,
                "expressions": expressions,
                "code": code,
            },
        )
        if promote:
            view = registry.promote(view.id)
        echo_json({"checkpoint": view.id, "status": view.status, "path": view.path, "metrics": view.metrics})


@train_app.command("online")
def online(
    cycles: int = typer.Option(3, help="Cycles of iterations -> gate -> promote."),
    iterations: int = typer.Option(2, help="GRPO iterations per cycle (rollouts + one training pass each)."),
    problems: int = typer.Option(8, help="Training problems per iteration."),
    samples: int = typer.Option(4, help="Workflows sampled per problem (the GRPO group size G)."),
    lr: float = typer.Option(2e-5, help="Learning rate of the LoRA."),
    loss_type: str = typer.Option("dapo", help="grpo | dapo (token-mean) | dr_grpo | bnpo."),
    vllm: bool = typer.Option(True, help="Serve Conductor and workers from a private vLLM server (else in-process)."),
    seed: int = typer.Option(0),
    dev_limit: int | None = typer.Option(None, help="Smoke runs only: gate on the first N dev problems."),
    gsm8k: int = typer.Option(150, help="GSM8K train questions in the training pool."),
    arith: int = typer.Option(150, help="Generated arithmetic questions in the training pool."),
    expressions: int = typer.Option(0, help="GSM8K train questions of one or two operations in the training pool."),
    code: int = typer.Option(0, help="MBPP code questions from outside its test split in the training pool."),
    data_dir: Path | None = typer.Option(None, help="Benchmark data (default: ../shared/data)."),
    report_dir: Path = typer.Option(
        Path("results/train-local"), help="events.jsonl, cycles.json, summary.json, tensorboard/."
    ),
) -> None:
    """The paper's loop through this queue: rollouts with G samples, GRPO on exactly those traces, gate, promote."""
    from conductor.cli.common import running_system
    from reward_pipeline.training.loops.local_run import LocalRunConfig, run_local
    from reward_pipeline.training.loops.online import OnlineConfig

    with errors_to_exit_codes():
        settings = load_settings()
        cfg = LocalRunConfig(
            online=OnlineConfig(
                cycles=cycles,
                iterations_per_cycle=iterations,
                problems_per_iteration=problems,
                samples=samples,
                seed=seed,
            ),
            train_gsm8k=gsm8k,
            train_arith=arith,
            train_expressions=expressions,
            train_code=code,
            learning_rate=lr,
            loss_type=loss_type,
            use_vllm=vllm,
            dev_limit=dev_limit,
        )
        summary = run_local(
            settings, _data_dir(data_dir), cfg, report_dir=report_dir, running_system=running_system, log=_print_event
        )
        typer.echo(f"final policy: {summary['final']}; report in {report_dir}")


def _print_event(event: dict) -> None:  # type: ignore[type-arg]
    if event.get("event") == "gate":
        cand, act = event["candidate"], event["active"]
        typer.echo(
            f"gate {cand['version']} vs {act['version']}: parse {cand['parse_rate']:.2f} vs {act['parse_rate']:.2f}, "
            f"accuracy {cand['accuracy']:.2f} vs {act['accuracy']:.2f}, tokens/q {cand['tokens_per_question']:.0f} vs "
            f"{act['tokens_per_question']:.0f} -> {'PASS' if event['passed'] else 'FAIL ' + '; '.join(event['reasons'])}",
            err=True,
        )
        return
    keys = ("event", "name", "version", "parse_rate", "reward_mean", "rows_trained", "step", "loss", "ratio_mean")
    typer.echo("  ".join(f"{k}={event[k]}" for k in keys if k in event), err=True)


@train_app.command("dataset")
def dataset(
    since: datetime | None = typer.Option(None, help="Rounds created at or after (ISO time)."),
    until: datetime | None = typer.Option(None, help="Rounds created before (ISO time)."),
    max_staleness: int | None = typer.Option(None, help="Most promotions between a row's policy and the active one."),
    tenant: str | None = typer.Option(None, help="Only this tenant's jobs."),
    reward_sources: str | None = typer.Option(
        None, help="Comma-separated reward sources to keep: verifier, judge, feedback, parse (default: all)."
    ),
    out: Path | None = typer.Option(None, help="Write the rows as JSONL (ids, logprobs, sampling, reward)."),
) -> None:
    """The GRPO dataset the trainer would use now: rows, groups, zero-variance groups, rewards, staleness."""
    import dataclasses
    import json

    from reward_pipeline.training.dataset import TraceFilter, build_dataset, parse_sources

    with errors_to_exit_codes():
        runtime, _ = _registry()
        sources = parse_sources(reward_sources)
        flt = TraceFilter(
            since=since,
            until=until,
            max_staleness=max_staleness,
            tenant_id=tenant,
            reward_sources=sources,
            use_feedback=sources is None or "feedback" in sources,
        )
        data = build_dataset(runtime.sessions, flt)
        if out is not None:
            with out.open("w") as f:
                for row in data.rows:
                    f.write(json.dumps(dataclasses.asdict(row)) + "\n")
        echo_json(data.stats())


@train_app.command("status")
def status(
    limit: int = typer.Option(10, help="Most recent cycles to show."),
    steps: int = typer.Option(0, help="Also print the newest cycle's last N optimizer steps."),
) -> None:
    """Recent training cycles (trigger, state, checkpoint, gate) with their health: reward by source,
    zero-variance groups, staleness, importance weights, ESS, capped and clipped shares, KL."""
    from reward_pipeline.training.health_report import cycle_lines, load_history

    with errors_to_exit_codes():
        runtime, registry = _registry()
        active = registry.active()
        typer.echo(f"active policy: {active.id if active else 'the pool default'}")
        history = load_history(runtime.sessions, limit)
        for c in reversed(history):
            for line in cycle_lines(c):
                typer.echo(line)
        trained = [c for c in history if c.steps]
        if steps and trained:
            newest = trained[-1]
            typer.echo(f"cycle {newest.id}, last {steps} optimizer steps:")
            keys = ("step", "loss", "iw_min", "iw_mean", "iw_max", "ess", "capped_fraction", "clip_fraction",
                    "kl_behaviour_current", "staleness")  # fmt: skip
            for st in newest.steps[-steps:]:
                typer.echo("  " + "  ".join(f"{k}={st[k]:.4g}" if isinstance(st.get(k), float) else f"{k}={st.get(k)}"
                                            for k in keys))  # fmt: skip


@train_app.command("report")
def report(
    out: Path = typer.Option(Path("results/training"), help="Directory for the PNGs."),
    limit: int | None = typer.Option(None, help="Only the newest N cycles."),
) -> None:
    """PNGs of training health: reward by cycle and source, importance-weight band and ESS per step, gate decisions."""
    from reward_pipeline.training.health_report import write_report

    with errors_to_exit_codes():
        runtime, _ = _registry()
        for path in write_report(runtime.sessions, out, limit):
            typer.echo(str(path))


@checkpoints_app.command("export")
def export_checkpoint(
    checkpoint_id: str = typer.Argument(..., help="A checkpoint id, or `active`."),
    to: Path = typer.Option(..., help="Directory to write the adapter and its record into."),
) -> None:
    """Copy a checkpoint's adapter (LoRA weights in fp16, config) and its full record (lineage, config,
    data window, metrics, gate) to a directory, e.g. to ship it as a pool's default Conductor."""
    from conductor.domain.errors import NotFound
    from reward_pipeline.training.export import export_adapter

    with errors_to_exit_codes():
        _, registry = _registry()
        if checkpoint_id == "active":
            active = registry.active()
            if active is None:
                raise NotFound("no active checkpoint to export")
            checkpoint_id = active.id
        path = export_adapter(registry, checkpoint_id, to)
        typer.echo(f"exported {checkpoint_id} to {path}")


@checkpoints_app.command("list")
def list_checkpoints() -> None:
    """Every checkpoint with its stage, status and headline metrics."""
    with errors_to_exit_codes():
        _, registry = _registry()
        for c in registry.list():
            gate = c.gate or {}
            verdict = "" if not gate else ("gate passed" if gate.get("passed") else "gate failed")
            typer.echo(f"{c.id}  {c.status:9}  stage={c.stage}  parent={c.parent_id or '-'}  {verdict}")


@checkpoints_app.command("show")
def show_checkpoint(checkpoint_id: str) -> None:
    """One checkpoint: config, dataset window, metrics and the gate's decision with its numbers."""
    import dataclasses

    with errors_to_exit_codes():
        _, registry = _registry()
        echo_json(dataclasses.asdict(registry.get(checkpoint_id)))


@checkpoints_app.command("promote")
def promote_checkpoint(checkpoint_id: str) -> None:
    """Make CHECKPOINT_ID the active Conductor; every process switches within seconds, no restart."""
    with errors_to_exit_codes():
        _, registry = _registry()
        view = registry.promote(checkpoint_id)
        typer.echo(f"active: {view.id}")


@checkpoints_app.command("rollback")
def rollback_checkpoint() -> None:
    """Re-activate the active checkpoint's parent (or the pool's own Conductor when it has none)."""
    with errors_to_exit_codes():
        _, registry = _registry()
        view = registry.rollback()
        typer.echo(f"active: {view.id if view else 'the pool default'}")


def register(app: typer.Typer) -> None:
    app.add_typer(train_app, name="train")
    app.add_typer(checkpoints_app, name="checkpoints")
