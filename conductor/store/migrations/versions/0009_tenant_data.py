"""tenant data: training consent per tenant, and when retention removed a job's texts

Revision ID: 0009_tenant_data
Revises: 0008_call_cache
Create Date: 2026-12-05 10:00:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_tenant_data"
down_revision: str | Sequence[str] | None = "0008_call_cache"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMNs (see 0006: batch mode would drop SQLite's expression index on jobs).
    op.add_column("tenants", sa.Column("train_on_data", sa.Boolean(), nullable=True))
    op.add_column("jobs", sa.Column("texts_removed_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "texts_removed_at")
    op.drop_column("tenants", "train_on_data")
