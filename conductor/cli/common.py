"""What every CLI command shares: settings, the running system, and errors mapped to exit codes."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import typer
from pydantic import ValidationError

from conductor.app.runtime import Runtime
from conductor.app.service import Service
from conductor.config.settings import Settings
from conductor.domain.errors import ConductorError, ConfigError, InputError, NotFound

EXIT_CODES = {NotFound: 4, InputError: 3, ConfigError: 2}


def load_settings(**overrides: Any) -> Settings:
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        raise ConfigError(f"invalid settings: {exc}") from exc


@dataclass
class System:
    settings: Settings
    runtime: Runtime
    service: Service


@contextlib.contextmanager
def running_system(settings: Settings, *, needs_worker: bool = True) -> Iterator[System]:
    """The service, plus an in-process worker when the broker is memory:// (the embedded default)."""
    # Celery is imported here, not at module level: the transport stays out of the domain.
    from tasks.app import create_app
    from tasks.dispatch import Dispatcher
    from tasks.embedded import EmbeddedWorker

    runtime = Runtime(settings)
    if settings.embedded and needs_worker and _uses_default_local_model(runtime):
        from conductor.inference.local_model import is_pulled, pull_default_model

        if not is_pulled(settings.model_cache):
            typer.echo("pulling the default local model (first run only)...", err=True)
            pull_default_model(settings.model_cache)
    app = create_app(settings, runtime)
    runtime.migrate()  # migrate before any task runs
    service = Service(runtime, Dispatcher(app))
    try:
        if settings.embedded and needs_worker:
            with EmbeddedWorker(
                app, concurrency=settings.embedded_concurrency, reap_every_s=settings.reaper_interval_s
            ):
                yield System(settings, runtime, service)
        else:
            yield System(settings, runtime, service)
    finally:
        runtime.close()


def _uses_default_local_model(runtime: Runtime) -> bool:
    """Whether the pool calls the bundled model in-process (a hosted pool needs no download)."""
    from conductor.inference.local_model import DEFAULT_MODEL_NAME

    pool = runtime.pool
    return any(spec.model == f"local/{DEFAULT_MODEL_NAME}" for spec in [pool.conductor, *pool.workers])


@contextlib.contextmanager
def errors_to_exit_codes() -> Iterator[None]:
    try:
        yield
    except ConductorError as exc:
        code = next((c for t, c in EXIT_CODES.items() if isinstance(exc, t)), 1)
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code) from exc


def echo_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")
