"""The order in which a worker takes work from the queues it consumes (Redis broker).

kombu's default is round robin: a worker that consumes every queue alternates between them. Over
a batch that ends (every batch does), that leaves model slots idle at the end: the last jobs'
plans were taken late, behind steps of jobs already started, and their steps then run one
dependency wave after another while the other slots have nothing to do (issue 30's figure). A
plan unlocks a whole workflow; a step unlocks at most the rest of one. So a worker takes a
Conductor call first whenever one waits, and rounds robin among the other queues.

This cannot starve the steps: plans exist only for jobs the feeder admitted (at most
`max_in_flight_jobs`), and a new job is admitted only as another ends.
"""

from __future__ import annotations

from kombu.utils.scheduling import round_robin_cycle

from tasks.names import Queue

#: The value of kombu's `queue_order_strategy` transport option that selects this order.
STRATEGY = f"{__name__}:ConductorFirst"


class ConductorFirst(round_robin_cycle):
    """The Conductor's queue first, then the others in round robin (kombu's `round_robin_cycle`)."""

    def consume(self, n: int) -> list[str]:
        items = self.items[:n]
        return [q for q in items if q == Queue.CONDUCTOR] + [q for q in items if q != Queue.CONDUCTOR]
