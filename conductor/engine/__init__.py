"""The job state machine: one transaction per transition, returning the effects to send after commit.

`Engine` is the one facade; its parts are split by what they govern:

| module | governs |
|---|---|
| `jobs.py` | start a job, count calls against its budgets, close it |
| `rounds.py` | lease a Conductor round, record its completion and parse, fail or hand it back |
| `steps.py` | lease a step, nested Conductor chains, record a step's output or failure |
| `recovery.py` | re-send work whose task was lost |
| `cancel.py` | cancel jobs while workers run them, in the transitions' lock order |
| `statements.py` | the hottest transitions' statements, built once |
| `transitions.py` | what they share: open rounds, start workflows, finish steps, rounds and chains |
"""

from conductor.engine.machine import Engine
from conductor.engine.rounds import PlanRecord

__all__ = ["Engine", "PlanRecord"]
