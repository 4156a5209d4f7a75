"""Exactly one beat: a second one refuses to start while the first holds the lock."""

from __future__ import annotations

import pytest

from conductor.domain.errors import ConfigError
from schedulers.beat import beat_schedule, single_beat
from tests.support.system import make_settings

pytestmark = pytest.mark.services


def test_a_second_beat_is_refused_while_the_first_runs_and_allowed_after(redis_db):
    with single_beat(redis_db, ttl_s=5):
        with pytest.raises(ConfigError, match="run exactly one beat"):
            with single_beat(redis_db, ttl_s=5):
                pass
    with single_beat(redis_db, ttl_s=5):
        pass


def test_the_schedule_runs_the_reaper_at_the_configured_interval(tmp_path):
    schedule = beat_schedule(make_settings(tmp_path, reaper_interval_s=7))
    assert schedule["reap-lost-work"] == {"task": "conductor.reap", "schedule": 7}
