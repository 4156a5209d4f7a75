"""The retraining tasks: beat's cheap check (default queue) and the cycle itself (train queue, one at a time)."""

from __future__ import annotations

import logging

from celery import Celery

from conductor.runtime import Runtime
from tasks.dispatch import Dispatcher
from tasks.names import TaskName
from tasks.services import service_for

log = logging.getLogger(__name__)


def register_training(app: Celery, runtime: Runtime) -> None:
    @app.task(name=TaskName.RETRAIN_CHECK.value, shared=False, ignore_result=True)
    def retrain_check() -> str:
        from schedulers.retrain import maybe_start_retrain

        decision = maybe_start_retrain(
            runtime.sessions, runtime.settings, lambda cycle_id: retrain.apply_async(args=[cycle_id])
        )
        log.info("retrain check: %s", decision)
        return decision

    # acks_late with a long cycle: a lost trainer leaves the cycle row `running`; the next check
    # then waits rather than start a second one beside a possibly live trainer.
    @app.task(name=TaskName.RETRAIN.value, shared=False, ignore_result=True, time_limit=None, soft_time_limit=None)
    def retrain(cycle_id: int) -> dict:  # type: ignore[type-arg]
        from reward_pipeline.evaluation.problems import data_dir
        from reward_pipeline.training.loops.cycle import run_retrain_cycle

        service = service_for(runtime, Dispatcher(app).submit)
        result = run_retrain_cycle(
            service, cycle_id, data_dir(), load_adapter=_adapter_loader(runtime), conductor=runtime.pool.conductor
        )
        log.info("retrain cycle %s: %s", cycle_id, result.get("status"))
        return {"status": result.get("status"), "candidate": result.get("candidate")}


def _adapter_loader(runtime: Runtime):  # type: ignore[no-untyped-def]
    """vLLM-served Conductors need each adapter loaded (under its own name) before a gate pins it."""
    spec = runtime.pool.conductor
    if spec.provider != "hosted_vllm" or not spec.api_base:
        return None
    from reward_pipeline.training.serving import VllmServing

    serving = VllmServing(spec.api_base, spec.model.split("/", 1)[1])
    return serving.load
