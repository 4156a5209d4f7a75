"""The whole loop on one machine: a vLLM server (or the in-process backend) serves the Conductor and
the workers, the embedded queue runs the jobs, and this process trains. `make train-local` runs it
from the untrained SmolLM2-135M-Instruct: warm-up -> gate -> promote, then GRPO cycles."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from conductor.app.service import Service
from conductor.config.pool import BUNDLED, ConductorSpec, load_pool
from conductor.config.settings import Settings
from conductor.domain.problem import Problem
from conductor.domain.tools import TOOL_PROVIDER
from conductor.inference.gateway import Gateway
from conductor.inference.local_model import model_dir
from reward_pipeline.training.board import TrainingBoard
from reward_pipeline.training.checkpoints import STARTING_STAGES, Registry
from reward_pipeline.training.curriculum import curriculum_expressions, mixed_dev, mixed_problems
from reward_pipeline.training.gate import evaluate_workers
from reward_pipeline.training.grpo import OfflineGRPOTrainer, make_config
from reward_pipeline.training.loops.online import (
    GateContext,
    LoopContext,
    OnlineConfig,
    Policy,
    continue_from,
    gate_and_promote,
    run_cycles,
    start_policy,
)
from reward_pipeline.training.policy import LoraSpec, load_trainable
from reward_pipeline.training.problems import dev_problems, training_problems, unseen_benchmark_prompts
from reward_pipeline.training.rollouts import Rollouts
from reward_pipeline.training.serving import LocalServing, VllmServing

SERVED = "smollm2"


@dataclass(frozen=True)
class LocalRunConfig:
    online: OnlineConfig
    train_gsm8k: int = 150
    train_arith: int = 150
    #: GSM8K train problems of one or two operations (with their verified expression) in the training pool.
    train_expressions: int = 0
    #: MBPP code questions from outside its test split in the training pool.
    train_code: int = 0
    learning_rate: float = 2e-5
    loss_type: str = "dapo"
    use_vllm: bool = True
    worker_max_tokens: int = 128
    dev_limit: int | None = None  #: smoke runs only: the gate's dev set is fixed otherwise
    #: "arithmetic" (GSM8K and generated arithmetic) or "mixed" (the six kinds of `training.curriculum`,
    #: ``train_mixed`` of each, and its own dev set).
    curriculum: str = "arithmetic"
    train_mixed: int = 0
    #: First plans probed per unseen benchmark at the end of the run (parse rates, base vs final policy).
    unseen_per_benchmark: int = 8


def training_pool(settings: Settings, base_url: str | None, cfg: LocalRunConfig) -> dict[str, Any]:
    """The bundled local pool, served by vLLM when given, with the compact prompt."""
    pool = yaml.safe_load((BUNDLED / "local.yaml").read_text())
    pool["conductor"].update(prompt="compact", max_tokens=256, policy_version="base", temperature=1.0)
    pool["conductor"].pop("adapter", None)
    for spec in [pool["conductor"], *pool["workers"]]:
        if base_url and not spec["model"].startswith(f"{TOOL_PROVIDER}/"):  # tools run in the worker
            spec.update(model=f"hosted_vllm/{SERVED}", api_base=base_url)
    for w in pool["workers"]:
        w["max_tokens"] = min(int(w.get("max_tokens", 160)), cfg.worker_max_tokens)
    return pool


@contextlib.contextmanager
def serving_stack(settings: Settings, cfg: LocalRunConfig) -> Iterator[tuple[Any, str | None]]:
    if not cfg.use_vllm:
        yield LocalServing(), None
        return
    from conductor.inference.vllm_server import VllmServer

    srv = VllmServer(
        model_dir(settings.model_cache),
        served_name=SERVED,
        max_model_len=2048,
        max_loras=8,
        max_lora_rank=64,  # a soup of warm-ups has the sum of their ranks (`conductor train soup`)
        log_path=settings.home / "vllm-train.log",
    )
    srv.start(timeout=300)
    try:
        yield VllmServing(srv.base_url, SERVED), srv.base_url
    finally:
        srv.stop()


class RunningQueue(Protocol):
    """What the run uses of the entry point's running system (`conductor.system.System`)."""

    @property
    def service(self) -> Service: ...

    @property
    def gateway(self) -> Gateway: ...


def run_local(
    settings: Settings,
    data_dir: Path,
    cfg: LocalRunConfig,
    *,
    report_dir: Path,
    running_system: Callable[[Settings], AbstractContextManager[RunningQueue]],
    log: Any = print,
) -> dict[str, Any]:
    """`running_system` is the entry point's wiring of the queue (embedded worker or a cluster)."""
    report_dir.mkdir(parents=True, exist_ok=True)
    with serving_stack(settings, cfg) as (serving, base_url):
        pool_file = settings.home / "pool-train.yaml"
        pool_file.write_text(yaml.safe_dump(training_pool(settings, base_url, cfg)))
        run_settings = settings.model_copy(
            update={
                "pool_file": pool_file,
                "recursion": False,
                "plan_retries": 0,
                "follow_active_checkpoint": False,
                # The gate and the rollouts measure the Conductor's own plans, not the fallback's rescues.
                "tool_miss_fallback": False,
                "embedded_concurrency": 16,
            }
        )
        with running_system(run_settings) as sysm:
            registry = Registry(sysm.service.sessions)
            rollouts = Rollouts(sysm.service)
            gateway = sysm.gateway
            if cfg.curriculum == "mixed":
                # Another seed than the warm-up's problems: GRPO meets questions the warm-up never saw.
                train = mixed_problems(cfg.train_mixed, seed=cfg.online.seed + 1) + curriculum_expressions(
                    data_dir, cfg.train_expressions
                )
                dev = mixed_dev()[: cfg.dev_limit]
            else:
                train = training_problems(
                    data_dir,
                    gsm8k=cfg.train_gsm8k,
                    arith=cfg.train_arith,
                    seed=cfg.online.seed,
                    expressions=cfg.train_expressions,
                    code=cfg.train_code,
                )
                dev = dev_problems(data_dir)[: cfg.dev_limit]
            base_model = model_dir(settings.model_cache)
            ctx_log = _tee(log, report_dir / "events.jsonl")
            gating = GateContext(rollouts, gateway, serving, registry, ctx_log)
            board = TrainingBoard(report_dir / "tensorboard")
            start = _warmup_gate(gating, dev, cfg, shipped=load_pool(BUNDLED / "local.yaml").conductor, board=board)
            baselines = evaluate_workers(rollouts, gateway.pool, dev, tag="dev-baseline")
            ctx_log({"event": "dev_baselines", "workers": baselines})
            from transformers import AutoTokenizer

            model = load_trainable(base_model, start.adapter, LoraSpec())
            trl_config = make_config(
                settings.home / "_grpo", learning_rate=cfg.learning_rate, loss_type=cfg.loss_type, seed=cfg.online.seed
            )
            trainer = OfflineGRPOTrainer(
                model, AutoTokenizer.from_pretrained(base_model), trl_config, log=_both(ctx_log, board.step)
            )
            ctx = LoopContext(
                rollouts,
                gateway,
                serving,
                registry,
                ctx_log,
                trainer=trainer,
                home=settings.home,
                base_model=base_model.name,
            )
            history = run_cycles(
                ctx,
                start,
                train,
                dev,
                cfg.online,
                report=report_dir / "cycles.json",
                on_cycle=lambda record: _board_cycle(board, record),
            )
            board.close()
            final = start_policy(registry.active())
            unseen = _unseen(gateway, serving, data_dir, final, cfg)
    summary = {
        "config": asdict(cfg),
        "dev_baselines": baselines,
        "cycles": history,
        "final": final.version,
        "unseen": unseen,
    }
    (report_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    return summary


def _warmup_gate(
    ctx: GateContext,
    dev: Sequence[Problem],
    cfg: LocalRunConfig,
    *,
    shipped: ConductorSpec | None = None,
    board: TrainingBoard | None = None,
) -> Policy:
    """Gate the newest warm-up candidate against the base model and promote it when it passes. `shipped`: the
    deployed pool's Conductor, whose adapter GRPO continues from where this store has no warm-up of its own
    (the training pool serves policies by version and carries no adapter). The decision is cycle 0 on
    `board` (`cycle/gate/...`): a run with no GRPO cycle (`make train-local`'s default) still has its curve."""
    active = ctx.registry.active()
    if active is not None:
        return start_policy(active)
    candidates = [c for c in ctx.registry.list() if c.stage in STARTING_STAGES and c.status == "candidate"]
    if not candidates:  # no warm-up here: GRPO continues from what the pool serves
        return continue_from(ctx.registry, shipped)
    warm = candidates[-1]
    decision = gate_and_promote(ctx, Policy(warm.id, Path(warm.path or "")), Policy("base", None), dev, cfg.online)
    if board is not None:
        board.cycle(0, gate=decision)
    return Policy(warm.id, Path(warm.path or "")) if decision["passed"] else Policy("base", None)


def _unseen(gateway: Any, serving: Any, data_dir: Path, final: Policy, cfg: LocalRunConfig) -> dict[str, Any]:
    """Parse rates on benchmarks the loop never trained on, base vs the final policy (plans only)."""
    from reward_pipeline.training.probe import probe_plans

    by_bench: dict[str, list[Any]] = {}
    for name, problem in unseen_benchmark_prompts(data_dir, cfg.unseen_per_benchmark):
        by_bench.setdefault(name, []).append(problem)
    out: dict[str, Any] = {}
    for policy in (Policy("base", None), final):
        serving.activate(gateway, policy.version, policy.adapter, temperature=cfg.online.eval_temperature)
        out[policy.version] = {name: probe_plans(gateway, probs).as_dict() for name, probs in by_bench.items()}
    return out


def _both(first: Callable[[dict[str, Any]], None], second: Callable[[dict[str, Any]], None]) -> Any:
    def write(record: dict[str, Any]) -> None:
        first(record)
        second(record)

    return write


def _board_cycle(board: TrainingBoard, record: dict[str, Any]) -> None:
    """An online cycle on TensorBoard: its last iteration's rollouts and training summary, and the gate."""
    last = record["iterations"][-1] if record.get("iterations") else {}
    board.cycle(record["cycle"], rollouts=last.get("rollouts"), train=last.get("train"), gate=record.get("gate"))


def _tee(log: Any, path: Path) -> Any:
    def write(event: dict[str, Any]) -> None:
        with path.open("a") as f:
            f.write(json.dumps(event, default=str) + "\n")
        log(event)

    return write
