"""MCP servers a pool declares (its top-level `mcp_servers:` mapping), whose tools are workers.

A server is either a program spoken to over stdio (`command`, `args`, `env`) or an endpoint spoken to
over streamable HTTP (`url`, `headers`). A worker names one of its tools as `model: mcp/<server>/<tool>`;
the worker's own `timeout_s` and `retries` bound each call.
"""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field, model_validator

from conductor.domain.errors import ConfigError


class McpServerSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    command: str | None = Field(None, min_length=1, description="Program that serves MCP over stdio.")
    args: list[str] = Field(default_factory=list, description="Its command-line arguments.")
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment for the program, over the few safe variables (PATH, HOME, ...) it inherits.",
    )
    cwd: str | None = Field(None, description="Working directory of the program.")
    url: str | None = Field(None, pattern=r"^https?://", description="Streamable HTTP endpoint, e.g. .../mcp.")
    headers: dict[str, str] = Field(default_factory=dict, description="HTTP headers sent with every request.")
    headers_env: dict[str, str] = Field(
        default_factory=dict,
        description="HTTP headers whose values are read from environment variables (header -> variable name), "
        "for tokens that must not be written in the pool file.",
    )
    connect_timeout_s: float = Field(30.0, gt=0, description="Time to start (or reach) the server and greet it.")

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSpec:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either `command` (stdio) or `url` (streamable HTTP)")
        if self.url is not None and (self.args or self.env or self.cwd):
            raise ValueError("`args`, `env` and `cwd` are for a stdio server (`command`)")
        if self.command is not None and (self.headers or self.headers_env):
            raise ValueError("`headers` and `headers_env` are for an HTTP server (`url`)")
        return self

    def http_headers(self) -> dict[str, str]:
        """The headers to send, with the `headers_env` ones read now (a missing variable is a setting to fix)."""
        missing = sorted(v for v in self.headers_env.values() if v not in os.environ)
        if missing:
            raise ConfigError(f"MCP server headers need environment variables that are not set: {missing}")
        return {**self.headers, **{h: os.environ[v] for h, v in self.headers_env.items()}}

    @property
    def address(self) -> str:
        """Where the server is, for messages: its URL or its command line."""
        return self.url or " ".join([self.command or "", *self.args])
