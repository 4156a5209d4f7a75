"""Whether a tenant's traces may train the Conductor: its own choice, else the deployment's default.

The system's own jobs (no tenant: the CLI, evaluation, the online loop's training problems) always
may. A tenant that says no is left out of every dataset, cycle and online iteration, and is never
explored (exploration exists only to make training data).
"""

from __future__ import annotations


def may_train(choice: bool | None, default: bool) -> bool:
    """`choice` is the tenant's answer (None: never asked); `default` is `train_on_tenant_data`."""
    return default if choice is None else choice
