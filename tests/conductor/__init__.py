"""Tests of the conductor domain package (no Celery, no services)."""
