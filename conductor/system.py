"""The composition root: the one place a running system is built from Settings.

Settings -> pool, store (migrated), model gateway (with the cluster's call limiter), Celery app
and dispatcher, feeder, and the Service over them; in embedded mode (a memory:// broker) an
in-process Celery worker too. The CLI, the HTTP API, the tests and the benchmarks all build theirs
here, so there is one wiring to read and to get right.

It sits just below the entry points (`conductor.cli`, `api`) and above everything it wires: the
library (`conductor.app` down to `conductor.domain`), the Celery tasks (`tasks`), the schedulers'
feeder and limiter and the reward pipeline. Nothing below it may import it or
`conductor.runtime` (import-linter: "only the entry points hold the runtime"): each part is given
what it uses (a sessionmaker, the settings, a submit or admit function) instead of a locator.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from celery import Celery

from conductor.app.service import Service
from conductor.config.pool import Pool, load_pool
from conductor.config.settings import Settings
from conductor.inference.gateway import CallLimiter, Gateway
from conductor.runtime import Runtime
from schedulers.beat import embedded_periodic
from schedulers.limits import cluster_limiter
from tasks.app import create_app
from tasks.dispatch import Dispatcher
from tasks.embedded import EmbeddedWorker
from tasks.services import service_for

__all__ = ["System", "celery_app", "running_system", "runtime_for", "service_for"]


@dataclass(frozen=True)
class System:
    """A running system: what entry points, tests and benchmarks use."""

    settings: Settings
    runtime: Runtime
    app: Celery
    dispatcher: Dispatcher
    service: Service

    @property
    def gateway(self) -> Gateway:
        return self.runtime.gateway


def runtime_for(settings: Settings, *, pool: Pool | None = None, limiter: CallLimiter | None = None) -> Runtime:
    """A process's parts. Model calls go through the cluster-wide limiter the pool declares (none
    without limits or a Redis), unless `limiter` is given."""
    return Runtime(settings, pool=pool, limiter=limiter, limiter_factory=cluster_limiter)


def celery_app(settings: Settings, runtime: Runtime | None = None) -> Celery:
    """The Celery app with every task registered over `runtime` (by default a fresh one, built
    lazily: a prefork worker's children connect after the fork)."""
    return create_app(settings, runtime or runtime_for(settings))


@contextlib.contextmanager
def running_system(
    settings: Settings,
    *,
    pool: Pool | None = None,
    limiter: CallLimiter | None = None,
    worker: bool | None = None,
    concurrency: int | None = None,
    pull_model: bool = False,
) -> Iterator[System]:
    """The system while the block runs; the store is migrated before any task can run.

    `worker`: run an in-process Celery worker (with the reaper and the batch sweep, beat's part)
    while the block runs; by default when the broker is memory://, where nothing else could.
    `pull_model`: that worker's first run downloads the bundled model when the pool calls it (the
    CLI and the API do; tests and benchmarks bring their own pools).
    """
    worker = settings.embedded if worker is None else worker
    pool = pool or load_pool(settings.pool_file)
    if worker and pull_model:
        _pull_default_model(settings, pool)
    runtime = runtime_for(settings, pool=pool, limiter=limiter)
    try:
        app = create_app(settings, runtime)
        runtime.migrate()
        dispatcher = Dispatcher(app)
        system = System(settings, runtime, app, dispatcher, service_for(runtime, dispatcher.submit))
        if not worker:
            yield system
            return
        with EmbeddedWorker(
            app,
            concurrency=concurrency or settings.embedded_concurrency,
            reap_every_s=settings.reaper_interval_s,
            periodic=embedded_periodic(settings),
        ):
            yield system
    finally:
        runtime.close()


def _pull_default_model(settings: Settings, pool: Pool) -> None:
    """Download the bundled model when the pool calls it in-process (a hosted pool needs none)."""
    from conductor.inference.local_model import DEFAULT_MODEL_NAME, is_pulled, pull_default_model

    uses_it = any(spec.model == f"local/{DEFAULT_MODEL_NAME}" for spec in [pool.conductor, *pool.workers])
    if uses_it and not is_pulled(settings.model_cache):
        print("pulling the default local model (first run only)...", file=sys.stderr)
        pull_default_model(settings.model_cache)
