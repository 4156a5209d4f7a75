"""A process's parts, built from one Settings object: the store, pool, gateway, engine and orchestrator.

Only the entry points hold a `Runtime` (the composition root `conductor.system`, the CLI, the API and
the Celery task bodies in `tasks/`); everything below them is given the parts it uses (a
sessionmaker, the settings, the pool, a gateway). import-linter keeps it that way.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property

from sqlalchemy import Engine as SqlEngine
from sqlalchemy.orm import Session, sessionmaker

from conductor.app.orchestrator import Orchestrator
from conductor.config.pool import Pool, load_pool
from conductor.config.settings import Settings
from conductor.engine import Engine
from conductor.inference.gateway import CallLimiter, Gateway
from conductor.inference.policy import ActivePolicy, ActivePolicyCache
from conductor.store import queries
from conductor.store.call_cache import StoreCallCache
from conductor.store.db import make_engine, session_factory, upgrade

#: Builds the cluster-wide call limiter for a pool (or None: no limits). Passed in by the composition
#: root (`schedulers.limits.cluster_limiter`): the library does not import schedulers.
LimiterFactory = Callable[[Settings, Pool], CallLimiter | None]


class Runtime:
    """Everything built from settings, lazily and once per process (workers build theirs after fork)."""

    def __init__(
        self,
        settings: Settings,
        *,
        pool: Pool | None = None,
        limiter: CallLimiter | None = None,
        limiter_factory: LimiterFactory | None = None,
    ) -> None:
        self.settings = settings
        self._pool = pool
        self._limiter = limiter
        self._limiter_factory = limiter_factory

    @cached_property
    def db(self) -> SqlEngine:
        engine = make_engine(self.settings.db_url, self.settings.links)
        upgrade(engine)
        return engine

    @cached_property
    def sessions(self) -> sessionmaker[Session]:
        return session_factory(self.db)

    @cached_property
    def pool(self) -> Pool:
        return self._pool or load_pool(self.settings.pool_file)

    @cached_property
    def gateway(self) -> Gateway:
        limiter = self._limiter
        if limiter is None and self._limiter_factory is not None:
            limiter = self._limiter_factory(self.settings, self.pool)
        gateway = Gateway(
            self.pool,
            model_home=self.settings.model_cache,
            limiter=limiter,
            direct_openai=self.settings.direct_openai,
            plan_grammar=self.settings.plan_grammar,
            cache=StoreCallCache(self.sessions) if self.settings.call_cache != "off" else None,
            cache_mode=self.settings.call_cache,
            call_slots=self.settings.call_slots,
        )
        if self.settings.follow_active_checkpoint:
            gateway.follow(ActivePolicyCache(self._read_active_policy, ttl_s=self.settings.policy_refresh_s))
        # The Conductor's prompt shows each MCP tool as its server describes it: asked once per process,
        # on the sessions the calls will use.
        gateway.mcp.describe(self.pool)
        return gateway

    def _read_active_policy(self) -> ActivePolicy | None:
        with self.sessions() as s:
            row = queries.active_checkpoint(s)
        return ActivePolicy(version=row.id, adapter_path=row.path) if row is not None and row.path else None

    @cached_property
    def engine(self) -> Engine:
        return Engine(self.sessions, self.settings, self.pool)

    @cached_property
    def orchestrator(self) -> Orchestrator:
        return Orchestrator(self.engine, self.gateway, self.pool, answer_writer=self.settings.fallback_worker)

    def migrate(self) -> None:
        """Create or upgrade the schema now rather than on first use."""
        _ = self.db

    def close(self) -> None:
        if "gateway" in self.__dict__:
            self.gateway.close()
        if "db" in self.__dict__:
            self.db.dispose()
