"""GET /v1/models: `conductor`, and `conductor:<pool>` for the pool this deployment runs."""

from __future__ import annotations

from fastapi import APIRouter, Request

from api.deps import ModelsCaller
from api.schemas.common import ModelCard, ModelList

router = APIRouter(prefix="/v1", tags=["models"])


def model_names(request: Request) -> list[str]:
    return ["conductor", f"conductor:{request.app.state.pool_name}"]


@router.get("/models", response_model=ModelList)
def list_models(request: Request, _: ModelsCaller) -> ModelList:
    created = request.app.state.started
    return ModelList(data=[ModelCard(id=name, created=created) for name in model_names(request)])
