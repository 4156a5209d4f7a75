"""`conductor api` (the HTTP API on uvicorn) and `conductor keys` (tenants' API keys)."""

from __future__ import annotations

import typer

from conductor.cli.common import errors_to_exit_codes, load_settings, tenant_choice

keys_app = typer.Typer(no_args_is_help=True, help="API keys: created per tenant, shown once, stored as sha256.")


def api_command(
    host: str | None = typer.Option(None, help="Listen address (default: CONDUCTOR_API_HOST)."),
    port: int | None = typer.Option(None, help="Port (default: CONDUCTOR_API_PORT)."),
    log_level: str = typer.Option("info", "--log-level"),
) -> None:
    """Serve the OpenAI-compatible HTTP API (and /v1/jobs, /metrics, /docs, the /ui explorer) over the same service as the CLI."""
    import uvicorn

    from api.app import create_app

    with errors_to_exit_codes():
        settings = load_settings()
        bind, at = host or settings.api_host, port or settings.api_port
        shown = "127.0.0.1" if bind in ("0.0.0.0", "::") else bind
        typer.echo(
            f"job explorer: http://{shown}:{at}/ui (log in with a key from `conductor keys create`;"
            " `--scopes admin` sees every tenant and CLI jobs)",
            err=True,
        )
        # access_log off: uvicorn would log query strings; keys travel in headers, never logged.
        uvicorn.run(
            create_app(settings),
            host=bind,
            port=at,
            log_level=log_level,
            access_log=False,
        )


@keys_app.command("create")
def keys_create(
    tenant: str = typer.Option(..., help="Tenant name; created on first use."),
    scopes: str | None = typer.Option(
        None,
        help="Comma-separated: models,chat,jobs,files,batches (default: all); admin (never by default) lets /ui show every tenant.",
    ),
    expires_in_days: float | None = typer.Option(None, help="The key stops working after this many days."),
    max_concurrent_jobs: int | None = typer.Option(None, help="Tenant quota: jobs in flight at once."),
    tokens_per_day: int | None = typer.Option(None, help="Tenant quota: tokens per UTC day."),
    usd_per_day: float | None = typer.Option(None, help="Tenant quota: dollars per UTC day."),
    webhook_url: str | None = typer.Option(None, help="Tenant's webhook endpoint for job and batch events."),
    training: str | None = typer.Option(
        None,
        help="Whether the tenant's traces may train the Conductor: on, off, or unset "
        "(CONDUCTOR_TRAIN_ON_TENANT_DATA decides); as `conductor tenants training`. Not given: unchanged.",
    ),
) -> None:
    """Create an API key and print it once (only its hash is kept), with the tenant's webhook secret."""
    from conductor.app.tenants import Quotas, create_key, set_training
    from conductor.runtime import Runtime
    from conductor.store.models import Tenant

    with errors_to_exit_codes():
        agreed = tenant_choice(training) if training is not None else None
        runtime = Runtime(load_settings())
        try:
            quotas = None
            if any(v is not None for v in (max_concurrent_jobs, tokens_per_day, usd_per_day)):
                quotas = Quotas(max_concurrent_jobs, tokens_per_day, usd_per_day)
            key, tenant_id = create_key(
                runtime.sessions,
                tenant,
                scopes=[x.strip() for x in scopes.split(",") if x.strip()] if scopes else None,
                expires_in_days=expires_in_days,
                quotas=quotas,
                webhook_url=webhook_url,
            )
            if training is not None:
                set_training(runtime.sessions, tenant, agreed)
            with runtime.sessions() as s:
                secret = s.get_one(Tenant, tenant_id).webhook_secret
        finally:
            runtime.close()
        typer.echo(key)
        typer.echo(f"tenant {tenant} ({tenant_id}); webhook signing secret: {secret}", err=True)
        typer.echo("store the key now: it cannot be shown again", err=True)


@keys_app.command("revoke")
def keys_revoke(prefix: str = typer.Argument(..., help="The key's first 10 characters.")) -> None:
    """Revoke a key by its prefix."""
    from conductor.app.tenants import revoke_key
    from conductor.runtime import Runtime

    with errors_to_exit_codes():
        runtime = Runtime(load_settings())
        try:
            n = revoke_key(runtime.sessions, prefix)
        finally:
            runtime.close()
        typer.echo(f"revoked {n} key(s)", err=True)


@keys_app.command("exploration")
def keys_exploration(
    tenant: str = typer.Argument(..., help="Tenant name."),
    choice: str = typer.Argument(..., help="on (opt in), off (opt out) or unset (never asked: off)."),
) -> None:
    """Opt a tenant in or out of exploration: extra Conductor samples of its jobs without a reference,
    run after its answer, judged and used for retraining. A tenant never asked is off."""
    from conductor.app.tenants import set_exploration
    from conductor.runtime import Runtime

    with errors_to_exit_codes():
        agreed = tenant_choice(choice)
        runtime = Runtime(load_settings())
        try:
            set_exploration(runtime.sessions, tenant, agreed)
        finally:
            runtime.close()
        typer.echo(f"tenant {tenant}: exploration {choice}", err=True)


def register(app: typer.Typer) -> None:
    app.command("api")(api_command)
    app.add_typer(keys_app, name="keys")
