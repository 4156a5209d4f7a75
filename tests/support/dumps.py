"""Everything a deployment keeps, as text to search: the database (every row of every table, or
`pg_dump`) and the files directory. For tests that say some text is gone everywhere."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from sqlalchemy import MetaData, create_engine, select


def database_text(url: str) -> str:
    """Every row of every table, one line each, on SQLite and PostgreSQL alike."""
    engine = create_engine(url)
    try:
        meta = MetaData()
        meta.reflect(engine)
        lines = []
        with engine.connect() as conn:
            for table in sorted(meta.tables.values(), key=lambda t: t.name):
                lines += [f"{table.name}: {tuple(row)!r}" for row in conn.execute(select(table))]
        return "\n".join(lines)
    finally:
        engine.dispose()


def pg_dump_text(url: str) -> str:
    """`pg_dump` of a PostgreSQL database (schema and data, as plain SQL)."""
    pg_dump = shutil.which("pg_dump")
    assert pg_dump, "pg_dump is not installed"
    return subprocess.run(
        [pg_dump, "--no-owner", url.replace("+psycopg", "")], check=True, capture_output=True, text=True
    ).stdout


def files_text(root: Path) -> str:
    """The bytes of every file under `root`, decoded leniently, each after its path."""
    return "\n".join(f"{p}: {p.read_bytes().decode(errors='replace')}" for p in sorted(root.rglob("*")) if p.is_file())
