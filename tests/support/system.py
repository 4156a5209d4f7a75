"""Build a whole running system for a test: store, pool, Celery app and worker, service."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from celery import Celery

from conductor.app.runtime import Runtime
from conductor.app.service import Service
from conductor.config.pool import Pool
from conductor.config.settings import Settings
from tasks.app import create_app
from tasks.dispatch import Dispatcher
from tasks.embedded import EmbeddedWorker
from tasks.names import TaskName


@dataclass
class System:
    settings: Settings
    runtime: Runtime
    app: Celery
    service: Service


def make_settings(home: Path, **overrides: Any) -> Settings:
    defaults: dict[str, Any] = {"home": home, "broker_url": "memory://"}
    defaults.update(overrides)
    return Settings(**defaults)


@contextmanager
def embedded_system(home: Path, pool: Pool, *, concurrency: int = 4, **overrides: Any) -> Iterator[System]:
    settings = make_settings(home, **overrides)
    runtime = Runtime(settings, pool=pool)
    app = create_app(settings, runtime)
    runtime.migrate()  # migrate before the worker starts taking tasks
    with EmbeddedWorker(
        app,
        concurrency=concurrency,
        reap_every_s=settings.reaper_interval_s,
        periodic={TaskName.BATCH_SWEEP.value: settings.batch_sweep_s},
    ):
        yield System(settings, runtime, app, Service(runtime, Dispatcher(app)))
    runtime.close()
