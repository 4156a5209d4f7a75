"""A worker process SIGKILLed in the middle of a step's model call: the case the reaper exists for.

The Conductor plans the `[wf:chain]` workflow; the first step's call ("solve") takes 4 s at the scripted
server, long enough to kill the worker that holds it. With `FAST_REAPER` the step's lease ends and the
reaper re-sends it within seconds, and another worker runs it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from conductor.store.models import Step
from tests.conftest import default_script
from tests.support.cluster import Proc
from tests.support.scripted_llm import Reply
from tests.support.waiting import wait_for

CHAIN_QUESTION = "[wf:chain] survive a crash"
#: CONDUCTOR_* settings under which a killed worker's step is re-sent within seconds.
FAST_REAPER = {"step_lease_s": "8", "task_time_limit_s": "6", "reaper_interval_s": "1", "ready_grace_s": "5"}


def slow_first_step(model: str, messages: list[dict], body: dict) -> Reply:
    """The Conductor's chain plan; the first step's call takes long enough to kill its worker."""
    if model.endswith("scripted-conductor"):
        return default_script()(model, messages, body)
    return Reply(f"done: {messages[-1]['content']}", delay_s=4.0 if messages[-1]["content"] == "solve" else 0.1)


def kill_mid_call(sessions: sessionmaker[Session], job_id: str, procs: Mapping[str, Proc]) -> str:
    """Wait for the job's first step to run, let its model call reach the scripted server, then SIGKILL the
    worker process that holds its lease (the whole process); returns that worker's name."""

    def holder() -> str | None:
        with sessions() as s:
            running = (Step.job_id == job_id, Step.step_index == 0, Step.status == "running")
            return s.scalar(select(Step.lease_holder).where(*running))

    victim = wait_for("step 0 to start", holder, 60, every=0.1).split("@")[0]  # the lease names it: "w1@host"
    time.sleep(1.0)  # the call is in flight at the scripted server
    procs[victim].kill()
    return victim
