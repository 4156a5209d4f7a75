"""Configuration: the one settings object and worker pool files."""
