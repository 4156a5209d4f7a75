"""Traces are on only where the standard OpenTelemetry variables ask for them."""

from __future__ import annotations

from conductor.telemetry import requested


def test_an_otlp_endpoint_turns_traces_on():
    assert requested({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4318"})
    assert requested({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://localhost:4318/v1/traces"})


def test_without_an_endpoint_nothing_is_traced():
    assert not requested({})
    assert not requested({"OTEL_SERVICE_NAME": "conductor", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})


def test_the_sdks_own_switches_turn_an_endpoints_traces_off():
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4318"}
    assert not requested({**endpoint, "OTEL_SDK_DISABLED": "true"})
    assert not requested({**endpoint, "OTEL_SDK_DISABLED": "TRUE"})
    assert not requested({**endpoint, "OTEL_TRACES_EXPORTER": "none"})
    assert requested({**endpoint, "OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "otlp"})
