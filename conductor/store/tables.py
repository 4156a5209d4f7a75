"""The mapped tables as plain Core tables, for the engine's hot path.

A statement built from ORM attributes (`update(Step).where(Step.id == ...)`) runs through the
ORM's bulk-update machinery (compile-state plugin, `synchronize_session` evaluation against the
identity map) even when it returns plain rows; the same statement over `steps.c` is compiled and
cached once and executed as Core. Transitions that never load an object use these.
"""

from __future__ import annotations

from typing import cast

from sqlalchemy import Table

from conductor.store.models import Chain, Job, Round, Step

jobs = cast(Table, Job.__table__)
chains = cast(Table, Chain.__table__)
rounds = cast(Table, Round.__table__)
steps = cast(Table, Step.__table__)
