"""Application services: the orchestrator, the service used by every entry point, the runtime wiring."""
