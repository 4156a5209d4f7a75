"""Application services: the orchestrator, the service every entry point uses, tenant views, read models."""
