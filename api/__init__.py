"""The HTTP API: OpenAI-compatible chat, files and batches, plus native jobs, over the same Service as the CLI."""
