"""64-bit keys for the high-volume tables: chains, rounds, steps, rewards, judgements and webhook
attempts, and every column that points at one of them

A 32-bit SERIAL stops at 2,147,483,647: at a few thousand steps a second that is months, not years.
On PostgreSQL each column becomes BIGINT and each key's sequence `AS bigint` (a SERIAL's sequence is
typed too, and would still stop at the 32-bit limit). Each ALTER rewrites its table under an
ACCESS EXCLUSIVE lock: on a large store, run the upgrade in a maintenance window.

SQLite needs nothing: its INTEGER PRIMARY KEY is already a 64-bit rowid, and every integer column
stores up to 64 bits.

Revision ID: 0012_bigint_ids
Revises: 0011_batch_trace
Create Date: 2026-12-06 00:00:00

"""

from collections.abc import Sequence

from alembic import op

revision: str = "0012_bigint_ids"
down_revision: str | Sequence[str] | None = "0011_batch_trace"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Keys whose sequence widens with them.
KEYS = ["chains", "rounds", "steps", "rewards", "judgements", "webhook_attempts"]
#: (table, column) pointing at one of those keys.
POINTERS = [
    ("jobs", "answer_chain_id"),
    ("chains", "parent_step_id"),
    ("rounds", "chain_id"),
    ("steps", "round_id"),
    ("rewards", "chain_id"),
    ("rewards", "round_id"),
]


def _retype(kind: str) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in KEYS:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN id TYPE {kind}")
        op.execute(f"ALTER SEQUENCE IF EXISTS {table}_id_seq AS {kind}")
    for table, column in POINTERS:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE {kind}")


def upgrade() -> None:
    _retype("bigint")


def downgrade() -> None:
    # Fails, leaving the schema as it was, once any key has passed the 32-bit limit.
    _retype("integer")
