"""What every CLI command shares: settings, the running system, and errors mapped to exit codes.

Nothing heavy is imported at module level (no Celery, SQLAlchemy, litellm, pydantic models):
`conductor --help` must answer at once, so each command imports what it needs when it runs.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import typer

from conductor.domain.errors import ConductorError, ConfigError, InputError, ModelServerUnreachable, NotFound

if TYPE_CHECKING:
    from conductor.config.settings import Settings
    from conductor.system import System

#: Exit code for a broker, database or model server that cannot be reached.
UNREACHABLE_EXIT_CODE = 5
EXIT_CODES = {NotFound: 4, InputError: 3, ConfigError: 2, ModelServerUnreachable: UNREACHABLE_EXIT_CODE}

#: Set by the `--debug` option of the main command: errors keep their traceback.
DEBUG = False
_last_settings: Settings | None = None


def load_settings(**overrides: Any) -> Settings:
    global _last_settings
    from pydantic import ValidationError

    from conductor.config.settings import Settings

    try:
        _last_settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        raise ConfigError(f"invalid settings: {exc}") from exc
    return _last_settings


@contextlib.contextmanager
def running_system(settings: Settings, *, needs_worker: bool = True) -> Iterator[System]:
    """The composition root's system (`conductor.system`), with an in-process worker when the broker
    is memory:// (the embedded default) and the command runs jobs; that first run pulls the bundled model."""
    # Imported here, not at module level: `conductor --help` must not import Celery.
    from conductor.system import running_system as build

    with build(settings, worker=settings.embedded and needs_worker, pull_model=True) as system:
        yield system


# --------------------------------------------------------------------------- unreachable services


def redact_url(url: str) -> str:
    """``url`` without its password (``redis://:secret@host`` -> ``redis://:***@host``)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = (parts.username or "") + ":***"
    return urlunsplit(parts._replace(netloc=f"{user}@{netloc[-1]}"))


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


def _names(exc: BaseException) -> set[str]:
    return {f"{t.__module__.split('.')[0]}.{t.__name__}" for t in type(exc).__mro__}


_BROKER_ERRORS = {"kombu.OperationalError", "redis.ConnectionError", "redis.TimeoutError", "amqp.ConnectionError"}
_DATABASE_ERRORS = {"sqlalchemy.OperationalError", "sqlalchemy.InterfaceError", "psycopg.OperationalError"}
_MODEL_ERRORS = {
    "litellm.APIConnectionError",
    "litellm.Timeout",
    "openai.APIConnectionError",
    "httpx.ConnectError",
    "httpx.ConnectTimeout",
}


# A database error that is about reaching it, not about a query ("database is locked" is not).
_CANNOT_CONNECT_RE = re.compile(
    r"connect|refused|unable to open|timed? ?out|could not translate host|name or service|no route", re.IGNORECASE
)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


def unreachable_message(exc: BaseException, settings: Settings | None) -> str | None:
    """One line naming the service ``exc`` says is unreachable, its URL and what to check; None
    when ``exc`` is not about reaching a service."""
    for link in _chain(exc):
        names = _names(link)
        if names & _DATABASE_ERRORS and _CANNOT_CONNECT_RE.search(str(link)):
            url = redact_url(settings.db_url) if settings else "the database"
            return (f"cannot reach the database at {url} ({_first_line(link)}): is it running and does "
                    "CONDUCTOR_DATABASE_URL point at it?")  # fmt: skip
        if names & _BROKER_ERRORS:
            url = redact_url(settings.broker_url) if settings else "the broker"
            return (f"cannot reach the broker at {url} ({_first_line(link)}): is Redis running and does "
                    "CONDUCTOR_BROKER_URL point at it?")  # fmt: skip
        if names & _MODEL_ERRORS:
            where = getattr(link, "request", None)
            url = str(getattr(where, "url", "")) or "the model server"
            return (f"cannot reach the model server at {url} ({_first_line(link)}): is it running, and are "
                    "the pool's api_base and key variables right? (`conductor models check`)")  # fmt: skip
    return None


class UnreachableFailures:
    """Jobs that failed because a model server could not be reached, counted as a command follows
    them; `exit_if_any` then ends the command with one line naming the server."""

    def __init__(self) -> None:
        self.jobs = 0
        self.reasons: Counter[str] = Counter()
        self._last_job = ""

    def add(self, job: Mapping[str, Any]) -> None:
        """Count one ended job (a result line or a job view)."""
        self.jobs += 1
        self._last_job = str(job.get("job_id"))
        reason = ModelServerUnreachable.reason_in(job.get("error")) if job.get("status") == "failed" else None
        if reason is not None:
            self.reasons[reason] += 1

    def __bool__(self) -> bool:
        return bool(self.reasons)

    def exit_if_any(self) -> None:
        if self.reasons:
            reason = self.reasons.most_common(1)[0][0]  # several servers down: the one most jobs hit
            jobs = f"job {self._last_job}" if self.jobs == 1 else f"{self.reasons.total()} of {self.jobs} jobs"
            typer.echo(f"error: {jobs} failed: {reason}", err=True)
            raise typer.Exit(UNREACHABLE_EXIT_CODE)


@contextlib.contextmanager
def errors_to_exit_codes() -> Iterator[None]:
    """Our errors and unreachable services become one `error: ...` line and an exit code
    (with `--debug`, the traceback too)."""
    try:
        yield
    except ConductorError as exc:
        if DEBUG:
            raise
        code = next((c for t, c in EXIT_CODES.items() if isinstance(exc, t)), 1)
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code) from exc
    except Exception as exc:
        message = unreachable_message(exc, _last_settings)
        if message is None or DEBUG:
            raise
        typer.echo(f"error: {message}", err=True)
        raise typer.Exit(UNREACHABLE_EXIT_CODE) from exc


def echo_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


#: A tenant's yes / no / never-asked choice (training on its traces, exploration), as typed.
CHOICES: dict[str, bool | None] = {"on": True, "off": False, "unset": None}


def tenant_choice(word: str) -> bool | None:
    """`on`, `off` or `unset` as True, False or None; InputError for anything else."""
    if word not in CHOICES:
        raise InputError(f"choose on, off or unset, not {word!r}")
    return CHOICES[word]
