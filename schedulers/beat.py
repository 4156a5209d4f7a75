"""Celery beat: the periodic work (reaper now; retrain trigger and cleanup join it later). Runs once."""

from __future__ import annotations

from conductor.settings import Settings


def beat_schedule(settings: Settings) -> dict:
    return {
        "reap-lost-work": {"task": "conductor.reap", "schedule": settings.reaper_interval_s},
    }


def run_beat(settings: Settings, *, loglevel: str = "INFO") -> None:
    from tasks.app import create_app

    app = create_app(settings)
    app.conf.beat_schedule = beat_schedule(settings)
    app.Beat(loglevel=loglevel, schedule=str(settings.home / "celerybeat-schedule")).run()
