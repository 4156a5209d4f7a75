"""`conductor serve`: run a vLLM OpenAI-compatible server in the foreground until Ctrl-C.

Register it in the main CLI as a plain command:
`main_app.command("serve")(cli_serve.serve_command)`.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from conductor.inference.local_model import DEFAULT_MODEL_NAME, pull_default_model

if TYPE_CHECKING:
    from conductor.inference.vllm_server import VllmServer


def resolve_model(model: str, home: Path) -> Path:
    """A model directory, or the default model's name (pulled into `home` on first use)."""
    path = Path(model).expanduser()
    if path.is_dir():
        return path.resolve()
    if model in (DEFAULT_MODEL_NAME, "default"):
        return pull_default_model(home).resolve()
    raise typer.BadParameter(f"{model!r} is neither a model directory nor {DEFAULT_MODEL_NAME!r}", param_hint="MODEL")


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def serve_command(
    model: Annotated[
        str, typer.Option("--model", "-m", help="Model directory, or the default model's name.")
    ] = DEFAULT_MODEL_NAME,
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1.")] = 8000,
    served_name: Annotated[str, typer.Option(help="Model name clients use; default: the model directory's name.")] = "",
    enable_lora: Annotated[bool, typer.Option(help="Allow LoRA adapters, loadable at run time.")] = True,
    max_lora_rank: Annotated[
        int, typer.Option(help="Largest LoRA rank accepted (a soup of warm-ups has the sum of their ranks).")
    ] = 64,
    max_loras: Annotated[int, typer.Option(help="Adapters resident at once.")] = 2,
    max_model_len: Annotated[int, typer.Option(help="Context length.")] = 4096,
    kv_cache_gb: Annotated[int, typer.Option(help="GiB of CPU KV cache.")] = 1,
    dtype: Annotated[str, typer.Option(help="auto (bfloat16 on CPU) or float32.")] = "auto",
    python: Annotated[Path | None, typer.Option(help="Interpreter with vllm installed; default: .venv-vllm.")] = None,
    startup_timeout: Annotated[float, typer.Option(help="Seconds to wait for the server to be healthy.")] = 300.0,
) -> None:
    """Serve MODEL with vLLM on this machine until Ctrl-C."""
    from conductor.config.settings import Settings
    from conductor.inference.vllm_server import VllmServer, default_python

    settings = Settings()
    model_path = resolve_model(model, settings.model_cache)
    name = served_name or model_path.name
    log_path = settings.home / "logs" / f"vllm-{port}.log"
    server = VllmServer(
        model_path,
        served_name=name,
        port=port,
        python=python or default_python(),
        enable_lora=enable_lora,
        max_lora_rank=max_lora_rank,
        max_loras=max_loras,
        max_model_len=max_model_len,
        kv_cache_gb=kv_cache_gb,
        dtype=dtype,
        log_path=log_path,
    )
    # A process manager stops us with SIGTERM: take the same clean path as Ctrl-C so the
    # vLLM process tree goes too.
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    typer.echo(f"starting vLLM for {model_path} (log: {log_path})")
    _serve_until_stopped(server, startup_timeout)


def _serve_until_stopped(server: VllmServer, startup_timeout: float) -> None:
    """Start the server, wait until it exits or Ctrl-C; the vLLM process tree is stopped either way."""
    from conductor.domain.errors import VllmServerError

    try:
        server.start(timeout=startup_timeout)
    except VllmServerError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from exc
    except KeyboardInterrupt:
        server.stop()
        raise typer.Exit(130) from None
    name = server.served_name
    typer.echo(f"serving {name!r} at {server.base_url}  (litellm model: hosted_vllm/{name}); Ctrl-C stops")
    try:
        code = server.wait()
    except KeyboardInterrupt:
        typer.echo("stopping vLLM")
        code = 0
    finally:
        server.stop()
    if code:
        typer.echo(f"vLLM exited with code {code}; log tail:\n{server.log_tail()}", err=True)
        raise typer.Exit(code)


# Standalone single-command app (`python -m conductor.cli.serve`, tests); the main CLI
# should register `serve_command` itself rather than nest this app.
app = typer.Typer(help="Serve a local model with vLLM (OpenAI-compatible API).", add_completion=False)
app.command("serve")(serve_command)

if __name__ == "__main__":
    app()
