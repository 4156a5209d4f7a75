"""Pools that point at the scripted server."""

from __future__ import annotations

from conductor.config.pool import Pool


def scripted_pool(
    base_url: str,
    *,
    in_pool: bool = False,
    retries: int = 0,
    timeout_s: float = 10.0,
    fallback: str | None = None,
    extra_workers: list[dict] | None = None,
    mcp_servers: dict[str, dict] | None = None,
) -> Pool:
    common = {"api_base": base_url, "retries": retries, "timeout_s": timeout_s}
    workers = [
        {
            "name": "alpha",
            "model": "openai/scripted-worker-alpha",
            "description": "fast generalist",
            **common,
            "fallback": fallback,
        },
        {"name": "beta", "model": "openai/scripted-worker-beta", "description": "careful checker", **common},
        *(extra_workers or []),
    ]
    return Pool.model_validate(
        {
            "conductor": {
                "model": "openai/scripted-conductor",
                "api_base": base_url,
                "retries": retries,
                "timeout_s": timeout_s,
                "in_pool": in_pool,
                "policy_version": "scripted-v0",
            },
            "workers": workers,
            "mcp_servers": mcp_servers or {},
        }
    )
