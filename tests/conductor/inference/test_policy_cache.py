"""The active-policy cache: a store that cannot be read leaves the served policy as it was, and says so."""

from __future__ import annotations

import logging

import pytest

from conductor.inference.policy import ActivePolicy, ActivePolicyCache

CK1 = ActivePolicy(version="ck-1", adapter_path="/adapters/ck-1")
CK2 = ActivePolicy(version="ck-2", adapter_path="/adapters/ck-2")


class FlakyStore:
    """Answers with the next of its `replies`; an exception in the list is raised instead."""

    def __init__(self, *replies: ActivePolicy | Exception | None) -> None:
        self.replies = list(replies)

    def read(self) -> ActivePolicy | None:
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


def test_a_failing_store_keeps_the_last_policy_and_warns_once_per_outage(caplog: pytest.LogCaptureFixture) -> None:
    store = FlakyStore(CK1, ConnectionError("db down"), ConnectionError("db still down"), CK2, OSError("down again"))
    cache = ActivePolicyCache(store.read, ttl_s=0)
    logger = "conductor.inference.policy"

    with caplog.at_level(logging.INFO, logger=logger):
        assert cache.get() == CK1
        assert cache.get() == CK1  # given: the store fails; expect: ck-1 still served
        assert cache.get() == CK1
        assert cache.get() == CK2  # the store is back: the promotion is seen
        assert cache.get() == CK2

    warnings = [r for r in caplog.records if r.name == logger and r.levelno == logging.WARNING]
    assert len(warnings) == 2  # one per run of failures, not one per read
    assert "ck-1" in warnings[0].getMessage() and "db down" in warnings[0].getMessage()
    assert "ck-2" in warnings[1].getMessage() and "down again" in warnings[1].getMessage()
    assert any(r.levelno == logging.INFO and "works again" in r.getMessage() for r in caplog.records)
