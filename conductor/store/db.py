"""Engine and session factory for the store, and schema upgrades through Alembic."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import Session, sessionmaker

from conductor.config.connections import DEFAULT_LINKS, Links

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def make_engine(url: str, links: Links = DEFAULT_LINKS) -> Engine:
    """The engine for `url`; a PostgreSQL one with `links`' timeouts and keepalives on every connection."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 60})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):  # type: ignore[no-untyped-def]
            # WAL lets the in-process worker threads read while one writes.
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=60000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    connect_args = links.postgres_connect_args() if url.startswith("postgresql") else {}
    engine = create_engine(url, pool_size=10, max_overflow=20, connect_args=connect_args)
    ping_when_idle(engine)
    return engine


def ping_when_idle(engine: Engine, idle_s: float = 1.0) -> None:
    """Check a pooled connection before use only if it sat idle for `idle_s` (a dead one is replaced).

    `pool_pre_ping` pings on every checkout: one more round trip per transaction, ~10% of a
    worker's time at zero model latency. A connection handed back moments ago is as alive as
    the pre-ping would find it; a database restart that kills it in between fails that one
    transaction, and the disconnect it raises makes the pool replace every connection it holds.
    """

    @event.listens_for(engine, "checkin")
    def _checked_in(_dbapi_conn, record):  # type: ignore[no-untyped-def]
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_conn, record, _proxy):  # type: ignore[no-untyped-def]
        since = record.info.get("idle_since")
        if since is None or time.monotonic() - since < idle_s:
            return
        try:
            engine.dialect.do_ping(dbapi_conn)
            dbapi_conn.rollback()
        except Exception as exc:
            raise DisconnectionError(f"pooled connection is dead: {exc}") from exc  # the pool reconnects


def alembic_config() -> Config:
    """Alembic's config for this project's migrations (no ini file: the script location is enough)."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest Alembic revision (safe to call on every start)."""
    from alembic import command

    cfg = alembic_config()
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            # Several workers may start at once on a fresh database: one migrates, the rest wait.
            conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7261001)")
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)
