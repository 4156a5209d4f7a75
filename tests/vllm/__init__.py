"""Tests against a real vLLM CPU server (needs .venv-vllm; run as their own stage of make test)."""
