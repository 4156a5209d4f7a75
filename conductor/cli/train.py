"""`conductor train ...` and `conductor checkpoints ...`: the retraining pipeline's commands."""

from __future__ import annotations

import os
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

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


class PoolDraw(StrEnum):
    SUBSET_FIRST = "subset-first"
    PROBLEM_FIRST = "problem-first"
    FULL = "full"


@train_app.command("warmup")
def warmup(  # noqa: PLR0913 -- one parameter per CLI option (pyproject: max-args)
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
    mixed: int = typer.Option(
        0,
        help="Mixed curriculum: this many generated problems of each of six kinds (arithmetic, letter counts, "
        "lists, word transformations, multiple choice, facts); every route of every problem is run and only "
        "routes that earned reward become examples.",
    ),
    replan_share: float = typer.Option(0.0, help="Mixed curriculum: share of examples that are replan rounds."),
    pool_draw: PoolDraw = typer.Option(
        PoolDraw.SUBSET_FIRST,
        help="Mixed curriculum: the pool each example shows: a random renumbered subset drawn before the problem "
        "(then a problem its workers solved), drawn after it as until 2026-12-07, or the whole pool as deployed.",
    ),
    balance_routes: bool = typer.Option(
        False,
        help="Mixed curriculum: half the examples' verified routes a model, half a tool (default: kinds weigh the "
        "same, whatever route reward chose for them).",
    ),
    prefer_greedy: bool = typer.Option(
        False,
        help="Mixed curriculum: where several model workers earned reward on a question, the example names the one "
        "at the lowest temperature (default: one of them at random).",
    ),
    vllm: bool = typer.Option(True, help="Mixed curriculum: run the model routes on a private vLLM server."),
    trials: Path | None = typer.Option(
        None, help="Mixed curriculum: reuse the route trials a previous warm-up recorded (its route_trials.jsonl)."
    ),
    resamples: int = typer.Option(
        0,
        min=0,
        help="Mixed curriculum: this many more answers from each sampling model worker to every problem no "
        "route trial solved (run on the vLLM server even with --trials).",
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
        config = WarmupConfig(
            examples=examples, epochs=epochs, learning_rate=lr, seed=seed, verified_share=verified_share
        )
        provenance = {"command": "conductor train warmup", "gsm8k": gsm8k, "arith": arith, "expressions": expressions}
        if mixed:
            view = _mixed_warmup(
                runtime,
                registry,
                config,
                _data_dir(data_dir),
                mixed=mixed,
                expressions=expressions,
                replan_share=replan_share,
                pool_draw=pool_draw,
                vllm=vllm,
                trials=trials,
                resamples=resamples,
                balance_routes=balance_routes,
                prefer_greedy=prefer_greedy,
                provenance={**provenance, "mixed": mixed, "trials": str(trials) if trials else None},
            )
            if promote:
                view = registry.promote(view.id)
            echo_json({"checkpoint": view.id, "status": view.status, "path": view.path, "metrics": view.metrics})
            return
        problems = training_problems(
            _data_dir(data_dir), gsm8k=gsm8k, arith=arith, seed=seed, expressions=expressions, code=code
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


def _mixed_warmup(
    runtime: Any,
    registry: Any,
    config: Any,
    data_dir: Path,
    *,
    mixed: int,
    expressions: int,
    replan_share: float,
    pool_draw: PoolDraw,
    vllm: bool,
    provenance: dict[str, Any],
    trials: Path | None = None,
    resamples: int = 0,
    balance_routes: bool = False,
    prefer_greedy: bool = False,
) -> Any:
    """The route warm-up on the mixed curriculum (see `reward_pipeline.training.routes`)."""
    import contextlib

    from conductor.domain.tools import run_tool
    from conductor.inference.gateway import Gateway
    from conductor.inference.local_model import model_dir
    from conductor.sandbox import run_tool_program
    from reward_pipeline.training.batch_answers import BatchAnswerer, GatewayAnswerer
    from reward_pipeline.training.curriculum import curriculum_expressions, mixed_problems
    from reward_pipeline.training.loops.stages import route_warmup_stage
    from reward_pipeline.training.routes import load_trials

    settings = runtime.settings
    problems = mixed_problems(mixed, seed=config.seed) + curriculum_expressions(data_dir, expressions)
    base = model_dir(settings.model_cache)
    with contextlib.ExitStack() as stack:
        answer: Any = None
        if trials is not None and resamples == 0:
            pass  # recorded: no model runs again
        elif vllm:
            from conductor.inference.vllm_server import VllmServer

            srv = VllmServer(
                base,
                served_name="trials",
                max_model_len=2048,
                enable_lora=False,
                log_path=settings.home / "vllm-trials.log",
            )
            # The server compiles its model on start: minutes on 2 busy cores.
            srv.start(timeout=900)
            stack.callback(srv.stop)
            # The pool's own workers, served by that server: the trials call them as production does.
            served = runtime.pool.model_copy(
                update={
                    "workers": [
                        w
                        if w.is_tool
                        else w.model_copy(update={"model": "hosted_vllm/trials", "api_base": srv.base_url})
                        for w in runtime.pool.workers
                    ]
                }
            )
            answer = GatewayAnswerer(Gateway(served, model_home=settings.model_cache))
        else:
            answer = BatchAnswerer(base)
        return route_warmup_stage(
            registry=registry,
            pool=runtime.pool,
            problems=problems,
            base_model=base,
            home=settings.home,
            config=config,
            answer=answer,
            tool=lambda model, messages: run_tool(model, messages, execute=run_tool_program),
            max_steps=runtime.pool.step_cap(settings.max_steps),
            replan_share=replan_share,
            pool_draw=pool_draw.value,
            provenance=provenance,
            log=_print_event,
            recorded=load_trials(trials) if trials is not None else None,
            resamples=resamples,
            release=stack.close,
            balance_routes=balance_routes,
            prefer_greedy=prefer_greedy,
        )


@train_app.command("soup")
def soup(
    checkpoints: list[str] | None = typer.Argument(
        None, help="Checkpoint ids to soup (default: every warm-up candidate in this store)."
    ),
    weights: str | None = typer.Option(None, help="Comma-separated weights, one per checkpoint (default: equal)."),
    last: int | None = typer.Option(
        None, min=1, help="Without ids: only the newest N warm-up candidates (the seeds a recipe just ran)."
    ),
    adapter: list[Path] | None = typer.Option(
        None, help="An exported adapter folder with its record.json (the shipped one, say) joins the soup; repeatable."
    ),
) -> None:
    """One candidate whose weight change is the mean of several warm-ups' (one recipe at several seeds): what
    each run learned by chance shrinks, what the reward taught every run stays (`reward_pipeline.training.soup`)."""
    from reward_pipeline.training.loops.stages import soup_stage

    with errors_to_exit_codes():
        runtime, registry = _registry()
        ids = list(checkpoints or [])
        if not ids:
            ids = [c.id for c in registry.list() if c.stage == "warmup" and c.status == "candidate"]
            ids = ids[-last:] if last else ids
        extra = list(adapter or [])
        if len(ids) + len(extra) < 2:
            raise typer.BadParameter(f"a soup needs two checkpoints or more; this store offers {ids or 'none'}")
        w = [float(x) for x in weights.split(",")] if weights else None
        view = soup_stage(registry=registry, home=runtime.settings.home, checkpoint_ids=ids, adapters=extra, weights=w)
        config = view.config or {}
        echo_json(
            {"checkpoint": view.id, "status": view.status, "path": view.path, "soup_of": config["soup_of"]}
            | {"weights": config["weights"], "rank": view.metrics["rank"]}
        )


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
    dev_limit: int | None = typer.Option(
        None, help="Smoke runs only: gate on the first N dev problems, probe N plans per unseen benchmark."
    ),
    gsm8k: int = typer.Option(150, help="GSM8K train questions in the training pool."),
    arith: int = typer.Option(150, help="Generated arithmetic questions in the training pool."),
    expressions: int = typer.Option(0, help="GSM8K train questions of one or two operations in the training pool."),
    code: int = typer.Option(0, help="MBPP code questions from outside its test split in the training pool."),
    mixed: int = typer.Option(
        0, help="Mixed curriculum: this many problems of each of its six kinds (and the mixed dev set for the gate)."
    ),
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
            curriculum="mixed" if mixed else "arithmetic",
            train_mixed=mixed,
            unseen_per_benchmark=8 if dev_limit is None else dev_limit,
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
    tenant: str | None = typer.Option(None, help="Only this tenant's jobs (its name or id)."),
    reward_sources: str | None = typer.Option(
        None, help="Comma-separated reward sources to keep: verifier, judge, feedback, parse (default: all)."
    ),
    out: Path | None = typer.Option(None, help="Write the rows as JSONL (ids, logprobs, sampling, reward)."),
) -> None:
    """The GRPO dataset the trainer would use now: rows, groups, zero-variance groups, rewards, staleness."""
    import dataclasses
    import json

    from conductor.app.tenants import tenant_id
    from reward_pipeline.training.dataset import TraceFilter, build_dataset, parse_sources

    with errors_to_exit_codes():
        runtime, _ = _registry()
        sources = parse_sources(reward_sources)
        flt = TraceFilter(
            since=since,
            until=until,
            max_staleness=max_staleness,
            tenant_id=tenant_id(runtime.sessions, tenant) if tenant is not None else None,
            reward_sources=sources,
            use_feedback=sources is None or "feedback" in sources,
            train_on_tenant_data=runtime.settings.train_on_tenant_data,
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
    """Every checkpoint with its stage, status, gate verdict and the tenants whose data trained it."""
    from reward_pipeline.training.checkpoints import trained_on_tenants

    with errors_to_exit_codes():
        runtime, registry = _registry()
        tenants = trained_on_tenants(runtime.sessions)
        for c in registry.list():
            gate = c.gate or {}
            verdict = "" if not gate else ("gate passed" if gate.get("passed") else "gate failed")
            who = ",".join(tenants[c.id]["tenants"]) or "-"
            if not tenants[c.id]["complete"]:
                who += " (and unrecorded)"
            typer.echo(f"{c.id}  {c.status:9}  stage={c.stage}  parent={c.parent_id or '-'}  tenants={who}  {verdict}")
        if registry.active() is None:
            _echo_shipped(runtime.pool)


def _echo_shipped(pool: Any) -> None:
    """With no active checkpoint in this store, the Conductor is the pool's own: for the bundled pool, the
    adapter shipped with it, whose record (command, gate, metrics) lies beside it."""
    from reward_pipeline.training.export import record_entry

    adapter = pool.conductor.adapter_path()
    if adapter is None or not (record := adapter / "record.json").exists():
        typer.echo(f"active policy: the pool's Conductor ({pool.conductor.model}, no adapter)")
        return
    head = record_entry(adapter)
    gate = head.get("gate") or {}
    cand, base = gate.get("candidate") or {}, gate.get("active") or {}
    typer.echo(
        f"{head.get('id', pool.conductor.policy_version)}  active    stage={head.get('stage', '-')}  shipped with the pool at {adapter}  "
        f"gate {'passed' if gate.get('passed') else 'not recorded'}"
    )
    if cand:
        typer.echo(
            f"  dev set: accuracy {cand.get('correct')}/{cand.get('n')} vs {base.get('correct')}/{base.get('n')} "
            f"({base.get('version')}), parse {cand.get('parsed')}/{cand.get('plans')}, "
            f"{cand.get('tokens_per_question', 0):.0f} tokens a question; record: {record}"
        )


@checkpoints_app.command("show")
def show_checkpoint(
    checkpoint_id: str | None = typer.Argument(None, help="One checkpoint (default: every checkpoint)."),
) -> None:
    """A checkpoint (or every one): config, dataset window, metrics, the gate's decision with its numbers,
    and `trained_on`: the tenants whose data trained it, itself and through its ancestors."""
    import dataclasses

    from reward_pipeline.training.checkpoints import trained_on_tenants

    with errors_to_exit_codes():
        runtime, registry = _registry()
        tenants = trained_on_tenants(runtime.sessions)
        views = [registry.get(checkpoint_id)] if checkpoint_id else registry.list()
        shown = [{**dataclasses.asdict(v), "trained_on": tenants[v.id]} for v in views]
        echo_json(shown[0] if checkpoint_id else shown)


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
