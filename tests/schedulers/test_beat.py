"""Exactly one beat: a second one refuses to start while the first holds the lock, also long
after the lock's TTL (the holder renews it from a background thread); a beat whose lock was taken
stops; beat creates its home folder; the heartbeat and reaper age feed `conductor status`."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from conductor.domain.errors import ConfigError
from schedulers import health, keys
from schedulers.beat import beat_schedule, run_beat, single_beat
from tests.support.system import make_settings

pytestmark = pytest.mark.services


def test_a_second_beat_is_refused_while_the_first_runs_and_allowed_after(redis_db):
    with single_beat(redis_db, ttl_s=5):
        with pytest.raises(ConfigError, match="run exactly one beat"):
            with single_beat(redis_db, ttl_s=5):
                pass
    with single_beat(redis_db, ttl_s=5):
        pass


def test_two_beats_racing_past_the_lock_ttl_never_both_run(redis_db):
    import redis

    ttl = 2.0
    lost = threading.Event()
    refused = started = 0
    with single_beat(redis_db, ttl_s=ttl, on_lost=lost.set):
        deadline = time.monotonic() + 3.5 * ttl  # well past the TTL: only renewal keeps the lock
        while time.monotonic() < deadline:
            try:
                with single_beat(redis_db, ttl_s=ttl):
                    started += 1
            except ConfigError:
                refused += 1
            time.sleep(0.2)
        assert redis.Redis.from_url(redis_db).pttl(keys.BEAT_LOCK) > 0
    assert started == 0 and refused > 10
    assert not lost.is_set()
    with single_beat(redis_db, ttl_s=ttl):  # released on exit: the next beat may start
        pass


def test_a_beat_whose_lock_was_taken_stops_and_one_whose_lock_vanished_takes_it_back(redis_db):
    import redis

    client = redis.Redis.from_url(redis_db)
    lost = threading.Event()
    with single_beat(redis_db, ttl_s=1.5, on_lost=lost.set):
        client.delete(keys.BEAT_LOCK)  # Redis restarted without persistence
        time.sleep(1.2)
        assert client.exists(keys.BEAT_LOCK) and not lost.is_set()
        client.set(keys.BEAT_LOCK, b"someone-else")  # another beat holds it now
        assert lost.wait(3)


def test_beat_creates_its_home_folder_before_the_schedule_file(tmp_path, monkeypatch):
    home = tmp_path / "does" / "not" / "exist"
    seen = {}

    class FakeBeat:
        def __init__(self, *, loglevel: str, schedule: str) -> None:
            seen["schedule"] = schedule

        def run(self) -> None:
            seen["home_exists"] = home.is_dir()

    run_beat(SimpleNamespace(conf=SimpleNamespace(), Beat=FakeBeat), make_settings(home))
    assert seen == {"schedule": str(home / "celerybeat-schedule"), "home_exists": True}


def test_health_warns_without_a_beat_and_without_recent_reaper_runs(redis_db):
    import redis

    report = health.redis_health(redis_db, reaper_interval_s=1, queues=("reward",))
    assert report["beat_last_seen_s"] is None and report["reaper_last_run_s"] is None
    assert any("no beat is running" in w for w in report["warnings"])
    assert any("reaper has never run" in w for w in report["warnings"])
    with single_beat(redis_db, ttl_s=3):
        health.record_reaper_run(redis_db)
        report = health.redis_health(redis_db, reaper_interval_s=1, queues=("reward",))
    assert report["warnings"] == [] and report["reaper_last_run_s"] < 1 and report["queue_depth"] == {"reward": 0}
    redis.Redis.from_url(redis_db).set(keys.REAPER_LAST_RUN, f"{time.time() - 60:.3f}")
    report = health.redis_health(redis_db, reaper_interval_s=1, queues=())
    assert any("reaper last ran 60s ago" in w for w in report["warnings"])


def test_the_schedule_runs_the_reaper_at_the_configured_interval(tmp_path):
    schedule = beat_schedule(make_settings(tmp_path, reaper_interval_s=7))
    assert schedule["reap-lost-work"] == {"task": "conductor.reap", "schedule": 7}
