"""training: checkpoint config and gate, training cycles

Revision ID: 0002_training
Revises: 0001
Create Date: 2026-12-02 18:40:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_training"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("checkpoints") as batch:
        batch.add_column(sa.Column("config", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("gate", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("stage", sa.String(length=32), nullable=True))
        batch.add_column(sa.Column("promoted_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "training_cycles",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("trigger", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("checkpoint_id", sa.String(length=200), nullable=True),
        sa.Column("stats", sa.JSON(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_training_cycles_status", "training_cycles", ["status"])


def downgrade() -> None:
    op.drop_index("ix_training_cycles_status", table_name="training_cycles")
    op.drop_table("training_cycles")
    with op.batch_alter_table("checkpoints") as batch:
        batch.drop_column("promoted_at")
        batch.drop_column("stage")
        batch.drop_column("gate")
        batch.drop_column("config")
