"""The workflow state machine over the SQL store: what happens when a plan, a step or a chain ends.

Every public method is one transaction and returns `Effects`: the tasks that became runnable.
The caller (the Celery layer) sends them after the commit, so a crash between the two is
repaired by `recover()` from the database, and no task ever waits on another. Transitions are
guarded `UPDATE ... WHERE status = ...` statements: a duplicate delivery changes nothing.
"""

from __future__ import annotations

from conductor.engine.cancel import cancel_jobs
from conductor.engine.jobs import JobRules
from conductor.engine.recovery import Recovery
from conductor.engine.rounds import RoundRules
from conductor.engine.steps import StepRules


class Engine(JobRules, RoundRules, StepRules, Recovery):
    """The one facade over jobs, rounds, steps and recovery (all share `Transitions`)."""

    def cancel_jobs(self, job_ids: list[str]) -> int:
        """Cancel the unfinished ones among `job_ids`; how many this call cancelled (`engine.cancel`)."""
        return cancel_jobs(self.sessions, job_ids)
