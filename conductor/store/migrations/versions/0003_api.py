"""api: key scopes and expiry, tenant quotas and webhooks, files, Batch API fields, webhook deliveries

Revision ID: 0003_api
Revises: 0002_training
Create Date: 2026-12-03 10:00:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_api"
down_revision: str | Sequence[str] | None = "0002_training"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)
_BATCH_TIMES = (
    "in_progress_at",
    "finalizing_at",
    "completed_at",
    "failed_at",
    "cancelling_at",
    "cancelled_at",
    "expires_at",
    "expired_at",
)


def upgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("max_concurrent_jobs", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("tokens_per_day", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("usd_per_day", sa.Float(), nullable=True))
        batch.add_column(sa.Column("webhook_url", sa.Text(), nullable=True))
        batch.add_column(sa.Column("webhook_secret", sa.String(length=200), nullable=True))
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("prefix", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("scopes", sa.JSON(), nullable=False, server_default="[]"))
        batch.add_column(sa.Column("expires_at", _TS, nullable=True))
    op.create_table(
        "files",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=True),
        sa.Column("purpose", sa.String(length=32), nullable=False),
        sa.Column("filename", sa.String(length=300), nullable=False),
        sa.Column("bytes", sa.Integer(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_files_tenant_id", "files", ["tenant_id"])
    with op.batch_alter_table("batches") as batch:
        batch.add_column(sa.Column("status", sa.String(length=32), nullable=True))
        batch.add_column(sa.Column("endpoint", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("completion_window", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("input_file_id", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("output_file_id", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("error_file_id", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("invalid_lines", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("metadata", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("errors", sa.JSON(), nullable=True))
        for name in _BATCH_TIMES:
            batch.add_column(sa.Column(name, _TS, nullable=True))
        batch.create_index("ix_batches_status", ["status"])
    op.create_index("ix_jobs_tenant_created", "jobs", ["tenant_id", "created_at", "id"])
    op.create_index("ix_jobs_batch_line", "jobs", ["batch_id", "line_no"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=True),
        sa.Column("event_type", sa.String(length=64), nullable=False),
        sa.Column("subject_id", sa.String(length=64), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", _TS, nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("delivered_at", _TS, nullable=True),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_webhook_deliveries_tenant_id", "webhook_deliveries", ["tenant_id"])
    op.create_index("ix_webhook_deliveries_subject_id", "webhook_deliveries", ["subject_id"])
    op.create_index("ix_webhook_deliveries_status", "webhook_deliveries", ["status"])
    op.create_table(
        "webhook_attempts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("delivery_id", sa.String(length=64), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("duration_s", sa.Float(), nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.ForeignKeyConstraint(["delivery_id"], ["webhook_deliveries.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_webhook_attempts_delivery_id", "webhook_attempts", ["delivery_id"])


def downgrade() -> None:
    op.drop_index("ix_webhook_attempts_delivery_id", table_name="webhook_attempts")
    op.drop_table("webhook_attempts")
    for name in ("status", "subject_id", "tenant_id"):
        op.drop_index(f"ix_webhook_deliveries_{name}", table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
    op.drop_index("ix_jobs_batch_line", table_name="jobs")
    op.drop_index("ix_jobs_tenant_created", table_name="jobs")
    with op.batch_alter_table("batches") as batch:
        batch.drop_index("ix_batches_status")
        for name in (
            *_BATCH_TIMES,
            "errors",
            "metadata",
            "invalid_lines",
            "error_file_id",
            "output_file_id",
            "input_file_id",
            "completion_window",
            "endpoint",
            "status",
        ):
            batch.drop_column(name)
    op.drop_index("ix_files_tenant_id", table_name="files")
    op.drop_table("files")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("expires_at")
        batch.drop_column("scopes")
        batch.drop_column("prefix")
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("webhook_secret")
        batch.drop_column("webhook_url")
        batch.drop_column("usd_per_day")
        batch.drop_column("tokens_per_day")
        batch.drop_column("max_concurrent_jobs")
