"""Schema migrations: 0012 widens the high-volume keys (and what points at them) to BIGINT on
PostgreSQL, sequences included, and back; SQLite still migrates and autoincrements."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import BigInteger, Engine, text
from sqlalchemy.exc import DataError

from conductor.store.db import alembic_config, make_engine, session_factory, upgrade
from conductor.store.models import Base, Chain, Job, Round, Step

#: Every column the models declare 64-bit (`BigId`): the migration must have widened each of them.
WIDE = sorted(
    (table.name, column.name)
    for table in Base.metadata.tables.values()
    for column in table.columns
    if isinstance(column.type, BigInteger)
)
KEYS = [t for t, c in WIDE if c == "id"]


def _to(engine: Engine, revision: str, *, down: bool = False) -> None:
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        (command.downgrade if down else command.upgrade)(cfg, revision)


def _types(engine: Engine) -> dict[tuple[str, str], str]:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT table_name, column_name, data_type FROM information_schema.columns WHERE table_schema = 'public'"
            )
        ).all()
    return {(t, c): d for t, c, d in rows if (t, c) in WIDE}


def _sequence_types(engine: Engine) -> dict[str, str]:
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT sequencename, data_type::text FROM pg_sequences WHERE schemaname = 'public'")
        ).all()
    return {name.removesuffix("_id_seq"): kind for name, kind in rows if name.removesuffix("_id_seq") in KEYS}


@pytest.mark.services
def test_0012_widens_the_keys_to_bigint_and_back_on_postgres(pg_url):
    assert len(WIDE) == 12, WIDE  # six keys and the six columns pointing at them
    engine = make_engine(pg_url)
    try:
        _to(engine, "0011_batch_trace")
        assert set(_types(engine).values()) == {"integer"}
        assert set(_sequence_types(engine).values()) == {"integer"}

        _to(engine, "head")
        assert _types(engine) == {k: "bigint" for k in WIDE}
        assert _sequence_types(engine) == {t: "bigint" for t in KEYS}
        # A key past the 32-bit limit is stored and read back, through the sequence and the pointers.
        with engine.begin() as conn:
            conn.execute(text("SELECT setval('steps_id_seq', 3000000000)"))
            conn.execute(text("SELECT setval('rounds_id_seq', 3000000000)"))
            conn.execute(text("SELECT setval('chains_id_seq', 3000000000)"))
        sessions = session_factory(engine)
        with sessions.begin() as s:
            job = Job(id="j", problem={"question": "q"})
            s.add(job)
            s.flush()
            chain = Chain(job_id="j", question="q")
            s.add(chain)
            s.flush()
            rnd = Round(chain_id=chain.id, job_id="j", round_index=0, kind="plan")
            s.add(rnd)
            s.flush()
            step = Step(
                round_id=rnd.id,
                job_id="j",
                step_index=0,
                worker_index=0,
                worker_name="w",
                subtask="s",
                access=[],
                dependencies=[],
                pending_deps=0,
            )
            s.add(step)
            s.flush()
            job.answer_chain_id = chain.id
            ids = (chain.id, rnd.id, step.id)
        assert all(i > 2**31 for i in ids), ids
        with sessions() as s:
            assert s.get(Step, ids[2]).round_id == ids[1]  # type: ignore[union-attr]

        with pytest.raises(DataError):  # a key past the limit: the downgrade refuses, changing nothing
            _to(engine, "0011_batch_trace", down=True)
        assert set(_types(engine).values()) == {"bigint"}
        with engine.begin() as conn:  # back under the limit, so the downgrade can narrow
            for table in ("steps", "rounds", "chains", "jobs"):
                conn.execute(text(f"DELETE FROM {table}"))
                if table != "jobs":
                    conn.execute(text(f"SELECT setval('{table}_id_seq', 1)"))
        _to(engine, "0011_batch_trace", down=True)
        assert set(_types(engine).values()) == {"integer"}
        assert set(_sequence_types(engine).values()) == {"integer"}
        _to(engine, "head")  # and up again
        assert set(_types(engine).values()) == {"bigint"}
    finally:
        engine.dispose()


def test_sqlite_keys_still_autoincrement(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'c.db'}")
    try:
        upgrade(engine)
        sessions = session_factory(engine)
        with sessions.begin() as s:
            s.add(Job(id="j", problem={"question": "q"}))
            s.flush()
            chains = [Chain(job_id="j", question="q", sample_index=i) for i in range(2)]
            s.add_all(chains)
            s.flush()
            assert [c.id for c in chains] == [1, 2]
    finally:
        engine.dispose()
