"""Alembic environment: runs on the connection handed in by conductor.store.db.upgrade, or a URL."""

from alembic import context
from sqlalchemy import create_engine

from conductor.store.models import Base

config = context.config
target_metadata = Base.metadata

connection = config.attributes.get("connection")
if connection is None:
    engine = create_engine(config.get_main_option("sqlalchemy.url"))
    with engine.begin() as connection:
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
else:
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
