"""Model calls: the litellm gateway, the in-process transformers backend, the local model cache, vLLM."""
