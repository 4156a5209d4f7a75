"""the batch's trace context: the traceparent of the request that created it

Revision ID: 0011_batch_trace
Revises: 0010_job_trace
Create Date: 2026-12-06 00:00:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011_batch_trace"
down_revision: str | Sequence[str] | None = "0010_job_trace"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("batches", sa.Column("traceparent", sa.String(length=55), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("batches") as batch:
        batch.drop_column("traceparent")
