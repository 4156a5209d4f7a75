"""deterministic-call cache: the cached answers, and what each job's hits saved

Revision ID: 0008_call_cache
Revises: 0007_step_lease_holder
Create Date: 2026-12-03 20:10:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_call_cache"
down_revision: str | Sequence[str] | None = "0007_step_lease_holder"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMNs (see 0006: batch mode would drop SQLite's expression index on jobs).
    op.add_column("jobs", sa.Column("cache_hits", sa.Integer(), server_default="0", nullable=False))
    op.add_column("jobs", sa.Column("cached_tokens", sa.Integer(), server_default="0", nullable=False))
    op.add_column("jobs", sa.Column("saved_usd", sa.Float(), server_default="0", nullable=False))
    op.create_table(
        "call_cache",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=300), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("hits", sa.Integer(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )


def downgrade() -> None:
    op.drop_table("call_cache")
    for column in ("saved_usd", "cached_tokens", "cache_hits"):
        op.drop_column("jobs", column)
