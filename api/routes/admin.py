"""Administration routes, for a key with the `admin` scope (`conductor keys create --scopes admin`;
never given by default): a tenant's training consent, and deleting a tenant with all of its data.
The same functions as `conductor tenants training` and `conductor tenants delete`; a tenant's key
without the scope gets 403.

Deleting answers 409 while the tenant has jobs in flight (its keys are revoked by then, so nothing
new arrives: cancel or wait for them, and delete again)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from api.deps import AdminCaller, Api
from api.schemas.admin import TenantDeletion, TenantTraining, TrainingChoice
from api.schemas.common import ErrorResponse
from conductor.app.tenant_erasure import delete_tenant
from conductor.app.tenants import set_training
from conductor.domain.consent import may_train

router = APIRouter(
    prefix="/v1/admin/tenants",
    tags=["admin"],
    responses={403: {"model": ErrorResponse}, 404: {"model": ErrorResponse}},
)

TenantName = Annotated[str, Path(min_length=1, max_length=200, description="The tenant's name.")]


@router.put("/{tenant}/training", response_model=TenantTraining)
def put_training(tenant: TenantName, body: TrainingChoice, api: Api, _: AdminCaller) -> TenantTraining:
    tenant_id = set_training(api.sessions, tenant, body.training)
    trains = may_train(body.training, api.service.settings.train_on_tenant_data)
    return TenantTraining(tenant=tenant, tenant_id=tenant_id, training=body.training, trains=trains)


@router.delete("/{tenant}", response_model=TenantDeletion, responses={409: {"model": ErrorResponse}})
def delete(tenant: TenantName, api: Api, _: AdminCaller) -> TenantDeletion:
    return TenantDeletion.model_validate(delete_tenant(api.sessions, tenant, api.service.settings.files_path).to_json())
