"""What the broker holds: how many messages wait in kombu's Redis lists, and which tasks they carry.

kombu's Redis transport keeps a queue as a list (priorities 3/6/9 as "<queue>\\x06\\x16<p>"); a
message is a JSON document whose headers carry the task id. The feeder reads the depth; the reaper
reads the task ids so that work waiting in a queue is never taken for lost (messages already
delivered to a worker sit in kombu's `unacked` hash instead and are not counted as waiting: a
worker that died with them would hold them for the whole visibility timeout).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from conductor.config.connections import DEFAULT_LINKS, Links

_TASK_ID = re.compile(rb'"id": "([^"]+)"')  # the first one in a message is headers.id
_PAGE = 1000


def queue_keys(queues: Iterable[str]) -> list[str]:
    return [k for q in queues for k in (q, *(f"{q}\x06\x16{p}" for p in (3, 6, 9)))]


def redis_queue_depth(url: str, queues: Iterable[str], links: Links = DEFAULT_LINKS) -> Callable[[], int]:
    """Messages waiting in kombu's Redis lists for `queues` (priority sub-queues included)."""
    import redis

    client = redis.Redis.from_url(url, **links.redis_kwargs(socket_timeout_s=5))
    keys = queue_keys(queues)

    def depth() -> int:
        pipe = client.pipeline(transaction=False)
        for k in keys:
            pipe.llen(k)
        return int(sum(pipe.execute()))

    return depth


def redis_waiting_task_ids(
    url: str, queues: Iterable[str], *, limit: int, links: Links = DEFAULT_LINKS
) -> Callable[[], set[str] | None]:
    """The ids of the tasks whose messages wait in `queues`; None when more than `limit` wait (too
    many to read on every sweep: the caller then decides by time alone).

    Read page by page from the head: kombu pushes at the head and workers pop from the tail, so a
    page boundary can repeat a message but never skip one that is still waiting.
    """
    import redis

    client = redis.Redis.from_url(url, **links.redis_kwargs(socket_timeout_s=10))
    keys = queue_keys(queues)

    def waiting() -> set[str] | None:
        pipe = client.pipeline(transaction=False)
        for k in keys:
            pipe.llen(k)
        lengths = [int(n) for n in pipe.execute()]
        if sum(lengths) > limit:
            return None
        ids: set[str] = set()
        for key, n in zip(keys, lengths, strict=True):
            for start in range(0, n, _PAGE):
                page: list[bytes] = client.lrange(key, start, start + _PAGE - 1)  # type: ignore[assignment]
                for raw in page:
                    m = _TASK_ID.search(raw)
                    if m:
                        ids.add(m.group(1).decode())
        return ids

    return waiting


def waiting_task_ids(
    url: str, queues: Iterable[str], *, limit: int, links: Links = DEFAULT_LINKS
) -> Callable[[], set[str] | None]:
    """`redis_waiting_task_ids` on a Redis broker; elsewhere (the in-memory transport) nothing can
    be read, and the probe answers None."""
    if not url.startswith(("redis://", "rediss://")):
        return lambda: None
    return redis_waiting_task_ids(url, queues, limit=limit, links=links)
