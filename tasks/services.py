"""A Service over a process's parts: jobs go to the broker through `submit`, waiting ones are let in
by a feeder over the same store. The composition root (`conductor.system`) builds its Service here,
and so do the Celery tasks that submit work themselves (exploration, retraining, batch reads)."""

from __future__ import annotations

from conductor.app.service import Service, Submit
from conductor.runtime import Runtime
from schedulers.feeder import feeder_for


def service_for(runtime: Runtime, submit: Submit) -> Service:
    """Touches the store: call it where the process may connect (after a worker's fork)."""
    feeder = feeder_for(runtime.sessions, runtime.settings, submit)
    return Service(runtime.sessions, runtime.settings, submit=submit, admit=feeder.admit)
