"""The deterministic-call cache kept in the store: every process of a deployment (and the embedded
default, which has no Redis) shares it, and it survives restarts like the traces it saves work for."""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, sessionmaker

from conductor.domain.cached_answer import CachedAnswer
from conductor.store.models import CallCacheEntry


class StoreCallCache:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    def get(self, key: str) -> CachedAnswer | None:
        with self.sessions.begin() as s:
            row = s.get(CallCacheEntry, key)
            if row is None:
                return None
            s.execute(
                update(CallCacheEntry)
                .where(CallCacheEntry.key == key)
                .values(hits=CallCacheEntry.hits + 1)
                .execution_options(synchronize_session=False)
            )
            return CachedAnswer(row.text, row.model, row.prompt_tokens, row.completion_tokens, row.cost_usd)

    def put(self, key: str, answer: CachedAnswer) -> None:
        with self.sessions.begin() as s:
            insert = postgresql.insert if s.get_bind().dialect.name == "postgresql" else sqlite.insert
            values = {
                "key": key,
                "model": answer.model,
                "text": answer.text,
                "prompt_tokens": answer.prompt_tokens,
                "completion_tokens": answer.completion_tokens,
                "cost_usd": answer.cost_usd,
            }
            # Two workers that missed at once both answer; the first answer is kept (they are equal).
            s.execute(insert(CallCacheEntry).values(**values).on_conflict_do_nothing(index_elements=["key"]))
