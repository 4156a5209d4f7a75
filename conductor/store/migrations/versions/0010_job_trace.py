"""the job's trace context: the job span's traceparent and its caller's span id

Revision ID: 0010_job_trace
Revises: 0009_tenant_data
Create Date: 2026-12-05 10:00:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010_job_trace"
down_revision: str | Sequence[str] | None = "0009_tenant_data"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMNs (see 0006: batch mode would drop SQLite's expression index on jobs).
    op.add_column("jobs", sa.Column("traceparent", sa.String(length=55), nullable=True))
    op.add_column("jobs", sa.Column("trace_caller", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("trace_caller")
        batch.drop_column("traceparent")
