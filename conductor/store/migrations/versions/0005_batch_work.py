"""batch work on workers: how far a batch's input file has been read, and send accounting for the
work beat re-sends for a batch (reading its file, writing its output files)

Revision ID: 0005_batch_work
Revises: 0004_send_accounting
Create Date: 2027-01-12 10:00:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_batch_work"
down_revision: str | Sequence[str] | None = "0004_send_accounting"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("batches") as batch:
        batch.add_column(sa.Column("lines_read", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("sends", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("batches") as batch:
        batch.drop_column("sends")
        batch.drop_column("sent_at")
        batch.drop_column("lines_read")
