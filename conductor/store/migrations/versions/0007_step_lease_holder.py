"""step lease holder: `steps.claimed_by` becomes `lease_holder`; a step delegated to a nested workflow
has a status of its own (`delegated`) instead of the holder sentinel "nested"

Revision ID: 0007_step_lease_holder
Revises: 0006_production_traffic
Create Date: 2026-12-03 20:30:00

"""

from collections.abc import Sequence

from alembic import op

revision: str = "0007_step_lease_holder"
down_revision: str | Sequence[str] | None = "0006_production_traffic"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain RENAME COLUMN (PostgreSQL, SQLite >= 3.25), not batch mode: on SQLite batch mode
    # rebuilds the table (see 0006).
    op.execute("ALTER TABLE steps RENAME COLUMN claimed_by TO lease_holder")
    op.execute("UPDATE steps SET status = 'delegated' WHERE lease_holder = 'nested' AND status = 'running'")
    op.execute("UPDATE steps SET lease_holder = NULL WHERE lease_holder = 'nested'")


def downgrade() -> None:
    op.execute("UPDATE steps SET status = 'running', lease_holder = 'nested' WHERE status = 'delegated'")
    op.execute("ALTER TABLE steps RENAME COLUMN lease_holder TO claimed_by")
