"""One settings object: read from CONDUCTOR_* variables, bad combinations and typos rejected."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from conductor.config.settings import Settings


def test_settings_come_from_prefixed_environment_variables(monkeypatch, tmp_path):
    monkeypatch.setenv("CONDUCTOR_MAX_STEPS", "3")
    monkeypatch.setenv("CONDUCTOR_BROKER_URL", "redis://127.0.0.1:6379/2")
    settings = Settings(home=tmp_path)
    assert settings.max_steps == 3 and not settings.embedded
    assert settings.cluster_redis_url == "redis://127.0.0.1:6379/2"
    assert settings.db_url == f"sqlite:///{(tmp_path / 'conductor.db').resolve()}"


def test_a_misspelt_variable_is_an_error_not_silently_ignored(monkeypatch):
    monkeypatch.setenv("CONDUCTOR_MAX_STEP", "3")
    with pytest.raises(ValidationError, match="CONDUCTOR_MAX_STEP"):
        Settings()


def test_an_empty_variable_means_unset_as_compose_passes_an_unset_one(monkeypatch):
    # docker-compose.yml passes `${CONDUCTOR_RETENTION_DAYS:-}` through: "" when the operator set nothing.
    for name in ("RETENTION_DAYS", "WEBHOOK_ALLOW", "TRAIN_ON_TENANT_DATA", "MAX_BODY_BYTES"):
        monkeypatch.setenv(f"CONDUCTOR_{name}", "")
    settings = Settings()
    assert settings.retention_days is None and settings.webhook_allow == ()
    assert settings.train_on_tenant_data is True and settings.max_body_bytes == 8 << 20


def test_a_lease_shorter_than_the_task_time_limit_is_rejected():
    with pytest.raises(ValidationError, match="step_lease_s"):
        Settings(step_lease_s=60, task_time_limit_s=120)


def test_the_broker_redelivers_unacked_work_only_after_any_task_could_have_finished(tmp_path):
    from conductor.system import celery_app

    settings = Settings(home=tmp_path, broker_url="redis://127.0.0.1:6379/0", task_time_limit_s=100, step_lease_s=120)
    conf = celery_app(settings).conf
    assert conf.task_time_limit == 100
    assert conf.broker_transport_options["visibility_timeout"] > conf.task_time_limit
    assert conf.task_acks_late and conf.task_reject_on_worker_lost and conf.worker_prefetch_multiplier == 1
