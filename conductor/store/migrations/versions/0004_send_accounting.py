"""send accounting: when the reaper last re-sent a job's, round's or step's message, and how often

Revision ID: 0004_send_accounting
Revises: 0003_api
Create Date: 2027-01-10 10:00:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_send_accounting"
down_revision: str | Sequence[str] | None = "0003_api"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLES = ("jobs", "rounds", "steps")


def upgrade() -> None:
    for table in _TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True))
            batch.add_column(sa.Column("sends", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    for table in _TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("sends")
            batch.drop_column("sent_at")
