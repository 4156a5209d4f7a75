"""production traffic: reward sources and judge provenance, judgements, tenant exploration, training steps

Revision ID: 0006_production_traffic
Revises: 0005_batch_work
Create Date: 2026-12-03 17:00:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_production_traffic"
down_revision: str | Sequence[str] | None = "0005_batch_work"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    # Plain ADD COLUMNs, not batch mode: on SQLite batch mode rebuilds the table and would drop the
    # expression index `uq_jobs_tenant_idem` (idempotency keys), which it cannot reflect.
    op.add_column("rewards", sa.Column("judge_model", sa.String(length=300), nullable=True))
    op.add_column("rewards", sa.Column("rubric_version", sa.String(length=64), nullable=True))
    # Unparseable-plan rewards were written with source "verifier": they now say what they are.
    op.execute("UPDATE rewards SET source = 'parse' WHERE verifier = 'parse' AND source = 'verifier'")
    op.add_column("tenants", sa.Column("exploration", sa.Boolean(), nullable=True))
    op.add_column("jobs", sa.Column("explore_of", sa.String(length=64), nullable=True))
    op.create_index("ix_jobs_explore_of", "jobs", ["explore_of"])
    op.create_table(
        "judgements",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("worker", sa.String(length=200), nullable=False),
        sa.Column("judge_model", sa.String(length=300), nullable=True),
        sa.Column("rubric_version", sa.String(length=64), nullable=False),
        sa.Column("chain_ids", sa.JSON(), nullable=False),
        sa.Column("order", sa.JSON(), nullable=False),
        sa.Column("scores", sa.JSON(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("exploration", sa.Boolean(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"]),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    for col in ("job_id", "tenant_id", "status", "created_at"):
        op.create_index(f"ix_judgements_{col}", "judgements", [col])
    op.create_table(
        "training_steps",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("cycle_id", sa.Integer(), nullable=True),
        sa.Column("checkpoint_id", sa.String(length=200), nullable=True),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.ForeignKeyConstraint(["cycle_id"], ["training_cycles.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_training_steps_cycle_id", "training_steps", ["cycle_id"])
    op.create_index("ix_training_steps_checkpoint_id", "training_steps", ["checkpoint_id"])


def downgrade() -> None:
    op.drop_index("ix_training_steps_checkpoint_id", table_name="training_steps")
    op.drop_index("ix_training_steps_cycle_id", table_name="training_steps")
    op.drop_table("training_steps")
    for col in ("job_id", "tenant_id", "status", "created_at"):
        op.drop_index(f"ix_judgements_{col}", table_name="judgements")
    op.drop_table("judgements")
    op.drop_index("ix_jobs_explore_of", table_name="jobs")
    op.drop_column("jobs", "explore_of")
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("exploration")
    op.execute("UPDATE rewards SET source = 'verifier' WHERE source = 'parse'")
    with op.batch_alter_table("rewards") as batch:
        batch.drop_column("rubric_version")
        batch.drop_column("judge_model")
