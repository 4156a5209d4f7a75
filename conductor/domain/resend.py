"""When the reaper may re-send a message again: the last send, how many re-sends, a growing interval.

Pure arithmetic, so the rule reads (and is tested) apart from the SQL that applies it. A message is
plausibly lost once the interval since its last send has passed and the broker does not hold it in
a queue (the caller checks that part). The interval doubles with each re-send of the same thing, so
work that really waits in a long queue (or behind a slow worker) costs at most one duplicate per
doubling of its wait, never one per sweep.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta


@dataclass(frozen=True)
class ResendPolicy:
    grace_s: float  #: the first interval: how long a fresh message may wait before it counts as lost
    max_interval_s: float  #: the interval stops doubling here

    def interval(self, sends: int) -> timedelta:
        """How long after a send the next one may go, given `sends` earlier re-sends."""
        seconds = self.grace_s * 2.0 ** min(max(sends, 0), 30)
        return timedelta(seconds=min(seconds, max(self.grace_s, self.max_interval_s)))

    def due(self, last_sent: datetime, sends: int, now: datetime) -> bool:
        """A message sent at `last_sent` (after `sends` re-sends) is overdue at `now`."""
        return as_utc(last_sent) + self.interval(sends) <= as_utc(now)

    def lease_due(self, lease_until: datetime, sent_at: datetime | None, sends: int, now: datetime) -> bool:
        """Claimed work whose lease ran out: lost at once, unless re-sent since the lease ended, in
        which case that re-send gets its interval like any other."""
        lease_until, now = as_utc(lease_until), as_utc(now)
        if lease_until > now:
            return False
        if sent_at is None or as_utc(sent_at) < lease_until:
            return True
        return self.due(sent_at, sends, now)


def latest(*times: datetime | None) -> datetime | None:
    """The latest of the given times (None where none is known)."""
    known = [as_utc(t) for t in times if t is not None]
    return max(known) if known else None


def as_utc(t: datetime) -> datetime:
    """SQLite hands timestamps back without their zone; they were written in UTC."""
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)
