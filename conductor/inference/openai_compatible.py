"""The direct path to a self-hosted OpenAI-compatible server (vLLM, SGLang, llama.cpp, ...).

litellm earns its place where a request must be translated (Anthropic, Gemini, Bedrock, the
in-process backend). A server that already speaks the OpenAI protocol needs no translation, and
there litellm's per-call work (cost lookup in its price map, logging payloads, response
metadata, a logging thread-pool hand-off) was measured at about three quarters of the CPU of
the call itself. The `openai` SDK is lighter but still validates and transforms every request
and builds typed response models (about 1.3 ms of CPU a call against 0.8 ms for plain httpx:
docs/benchmarks/step_cost.md). This path is one pooled `httpx.Client` per server: the body is
the JSON the SDK would send (`extra_body` merged at the top level), the answer is the parsed JSON
with attribute access (`response.choices[0].message.content`, as the gateway reads litellm's).
Errors are raised as the `openai` exceptions of the same status, so retry and fallback rules
are one; a connection error keeps the httpx error as its cause (`gateway._unreachable`).
"""

from __future__ import annotations

import json
import threading
from typing import Any, cast

import httpx
import openai

#: Keys of the gateway's litellm-style kwargs that are not part of the request body.
_NOT_BODY = frozenset({"num_retries", "api_base", "api_key", "drop_params", "model", "timeout", "extra_body"})

#: The `openai` exception the SDK raises for each status (others: APIStatusError; 5xx: InternalServerError).
_STATUS_ERRORS: dict[int, type[openai.APIStatusError]] = {
    400: openai.BadRequestError,
    401: openai.AuthenticationError,
    403: openai.PermissionDeniedError,
    404: openai.NotFoundError,
    409: openai.ConflictError,
    422: openai.UnprocessableEntityError,
    429: openai.RateLimitError,
}


def eligible(provider: str, api_base: str | None, reasoning_effort: str | None) -> bool:
    """True for a request litellm would pass through untranslated: an OpenAI-protocol server of our own."""
    # reasoning_effort relies on litellm's drop_params for servers that reject it.
    return provider in ("openai", "hosted_vllm") and bool(api_base) and not reasoning_effort


class Fields(dict[str, Any]):
    """A JSON object read by attribute too (`r.choices[0].message`); a missing key reads as AttributeError."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


def request_body(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The chat-completions JSON for the gateway's litellm-style `kwargs` (model as `<provider>/<name>`)."""
    body = {k: v for k, v in kwargs.items() if k not in _NOT_BODY}
    body["model"] = str(kwargs["model"]).split("/", 1)[1]
    body.update(kwargs.get("extra_body") or {})
    return body


def status_error(response: httpx.Response) -> openai.APIStatusError:
    """The `openai` exception for an error answer, as the SDK would raise it."""
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    detail = body.get("error", body) if isinstance(body, dict) else body
    message = f"Error code: {response.status_code} - {detail}"
    cls = _STATUS_ERRORS.get(response.status_code)
    if cls is None:
        cls = openai.InternalServerError if response.status_code >= 500 else openai.APIStatusError
    return cls(message, response=cast(Any, response), body=body)


class OpenAICompatible:
    """Pooled `httpx.Client`s, one per (server, key), shared by every thread of a process."""

    def __init__(self) -> None:
        self._clients: dict[tuple[str, str], httpx.Client] = {}
        self._lock = threading.Lock()

    def _client(self, api_base: str, api_key: str) -> httpx.Client:
        key = (api_base, api_key)
        client = self._clients.get(key)
        if client is None:
            with self._lock:
                client = self._clients.get(key)
                if client is None:
                    client = httpx.Client(
                        base_url=api_base.rstrip("/") + "/",
                        headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"},
                        limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
                    )
                    self._clients[key] = client
        return client

    def completion(self, kwargs: dict[str, Any]) -> Fields:
        """One chat completion from the gateway's litellm-style `kwargs`."""
        client = self._client(str(kwargs["api_base"]), str(kwargs.get("api_key") or "unused"))
        timeout = kwargs.get("timeout")
        try:
            response = client.post(
                "chat/completions",
                content=json.dumps(request_body(kwargs)).encode(),
                timeout=httpx.Timeout(timeout) if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
        # The SDK types its errors' requests and responses with its own copy of httpx; the
        # gateway reads only `.response.headers` and the cause chain, which both have.
        except httpx.TimeoutException as exc:
            raise openai.APITimeoutError(request=cast(Any, exc.request)) from exc
        except httpx.TransportError as exc:
            raise openai.APIConnectionError(request=cast(Any, exc.request)) from exc
        if response.status_code >= 400:
            raise status_error(response)
        parsed: Fields = json.loads(response.content, object_hook=Fields)
        return parsed

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()
