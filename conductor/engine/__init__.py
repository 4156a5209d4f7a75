"""The job state machine: one transaction per transition, returning the effects to send after commit."""

from conductor.engine.machine import Engine

__all__ = ["Engine"]
