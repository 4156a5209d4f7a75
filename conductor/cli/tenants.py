"""`conductor tenants ...`: what a tenant agreed to (training on its traces), and deleting one.

The HTTP API's administration routes (`api/routes/admin.py`, for a key with the `admin` scope)
call the same functions: `PUT /v1/admin/tenants/{name}/training`, `DELETE /v1/admin/tenants/{name}`.
"""

from __future__ import annotations

import typer

from conductor.cli.common import CHOICES, echo_json, errors_to_exit_codes, load_settings, tenant_choice

app = typer.Typer(no_args_is_help=True, help="Tenants: training consent, listing, deletion.")


#: on/off/unset for a stored consent, the words `tenants training` and `keys create --training` take
_WORDS = {agreed: word for word, agreed in CHOICES.items()}


@app.command("list")
def list_tenants() -> None:
    """Every tenant with its keys, jobs, and whether its traces train the Conductor and it is explored."""
    from sqlalchemy import func, select

    from conductor.domain.consent import may_train
    from conductor.runtime import Runtime
    from conductor.store.models import ApiKey, Job, Tenant

    with errors_to_exit_codes():
        runtime = Runtime(load_settings())
        try:
            default = runtime.settings.train_on_tenant_data
            with runtime.sessions() as s:
                keys = {t: n for t, n in s.execute(select(ApiKey.tenant_id, func.count()).group_by(ApiKey.tenant_id))}
                jobs = {t: n for t, n in s.execute(select(Job.tenant_id, func.count()).group_by(Job.tenant_id))}
                for t in s.scalars(select(Tenant).order_by(Tenant.name)):
                    trains = "yes" if may_train(t.train_on_data, default) else "no"
                    typer.echo(
                        f"{t.name}  id={t.id}  keys={keys.get(t.id, 0)}  jobs={jobs.get(t.id, 0)}  "
                        f"training={_WORDS[t.train_on_data]} (trains: {trains})  exploration={_WORDS[t.exploration]}"
                    )
        finally:
            runtime.close()


@app.command("training")
def training(
    tenant: str = typer.Argument(..., help="Tenant name."),
    choice: str = typer.Argument(..., help="on (its traces may train the Conductor), off, or unset (the default)."),
) -> None:
    """Whether a tenant's traces may train the Conductor: `off` keeps every round of it out of
    `train dataset`, beat's cycles, the online loop and `traces export`, and stops its exploration.
    `unset` follows CONDUCTOR_TRAIN_ON_TENANT_DATA (default: on)."""
    from conductor.app.tenants import set_training
    from conductor.runtime import Runtime

    with errors_to_exit_codes():
        agreed = tenant_choice(choice)
        runtime = Runtime(load_settings())
        try:
            set_training(runtime.sessions, tenant, agreed)
        finally:
            runtime.close()
        typer.echo(f"tenant {tenant}: training {choice}", err=True)


@app.command("delete")
def delete(
    tenant: str = typer.Argument(..., help="Tenant name."),
    yes: bool = typer.Option(False, "--yes", help="Do it: without this flag nothing is deleted."),
) -> None:
    """Delete a tenant and all of its data: keys, jobs, rounds, steps, rewards, judgements, batches,
    files (rows and bytes), webhook deliveries. Prints what went and which checkpoints its data trained
    (their weights keep what they learned: roll back past them if that matters)."""
    from conductor.app.tenant_erasure import delete_tenant
    from conductor.domain.errors import InputError
    from conductor.runtime import Runtime

    with errors_to_exit_codes():
        if not yes:
            raise InputError(f"deleting tenant {tenant} cannot be undone: run again with --yes")
        runtime = Runtime(load_settings())
        try:
            report = delete_tenant(runtime.sessions, tenant, runtime.settings.files_path)
        finally:
            runtime.close()
        echo_json(report.to_json())
        for c in report.checkpoints:
            how = "its own data" if report.tenant_id in (c.own or ()) else "an ancestor's data"
            typer.echo(f"checkpoint {c.checkpoint_id} ({c.status}) was trained on {how} from {tenant}", err=True)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="tenants")
