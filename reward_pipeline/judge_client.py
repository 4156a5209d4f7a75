"""The LLM judge wired to the gateway: a `complete(messages) -> str` over one pool worker.

Problems with a rubric (and free-text problems with a reference) have no exact checker;
`JudgeVerifier` grades them with a chat model. Here that model is an ordinary pool worker,
so judge calls get the gateway's timeouts, retries, fallbacks, rate limits and accounting.

Which worker: the `worker` argument; else `settings.judge_worker` when the settings define
one; else a pool worker named ``judge``; else none (rubric problems then go unscored).
"""

from __future__ import annotations

from collections.abc import Callable

from conductor.config.pool import Pool
from conductor.config.settings import Settings
from conductor.domain.errors import ConfigError
from conductor.inference.gateway import Gateway
from reward_pipeline.verifiers import JudgeVerifier

__all__ = ["DEFAULT_JUDGE_WORKER", "judge_complete", "judge_worker_name", "make_judge"]

DEFAULT_JUDGE_WORKER = "judge"


def judge_complete(gateway: Gateway, worker: str) -> Callable[[list[dict[str, str]]], str]:
    """A completion function that sends the judge's messages to `worker` through the gateway."""
    gateway.pool.worker(worker)  # fail now, with the pool's names, not at the first verdict

    def complete(messages: list[dict[str, str]]) -> str:
        return gateway.call_worker(worker, messages).text

    return complete


def judge_worker_name(settings: Settings, pool: Pool, worker: str | None = None) -> str | None:
    """The pool worker that should judge, or None when nothing is configured."""
    name = worker or settings.judge_worker
    if name:
        return str(name)
    names = {w.name for w in pool.workers}
    return DEFAULT_JUDGE_WORKER if DEFAULT_JUDGE_WORKER in names else None


def make_judge(
    settings: Settings, pool: Pool, gateway: Gateway, worker: str | None = None, *, threshold: float = 0.7
) -> JudgeVerifier | None:
    """A JudgeVerifier over the gateway, or None when no judge worker is configured.

    Raises ConfigError when `worker` names a worker the pool does not have.
    """
    name = judge_worker_name(settings, pool, worker)
    if name is None:
        return None
    try:
        complete = judge_complete(gateway, name)
    except ConfigError as exc:
        raise ConfigError(f"judge worker: {exc}") from exc
    return JudgeVerifier(complete, threshold=threshold)
