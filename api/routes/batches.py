"""OpenAI Batch API: create (the input file is read by a worker), retrieve, list, cancel."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api.deps import BatchesCaller, BatchesDep
from api.schemas.batches import BatchCreate, BatchList, BatchObject
from api.schemas.common import ErrorResponse
from conductor.app.batches.repair import retry_failed

router = APIRouter(prefix="/v1/batches", tags=["batches"], responses={404: {"model": ErrorResponse}})


@router.post("", response_model=BatchObject, responses={400: {"model": ErrorResponse}, 429: {"model": ErrorResponse}})
def create_batch(body: BatchCreate, batches: BatchesDep, who: BatchesCaller) -> BatchObject:
    # Stores the batch row and sends the read to a worker: a 100k-line file takes a while, and an
    # API restart must not lose it.
    batch = batches.create(
        who.tenant_id, body.input_file_id, endpoint=body.endpoint, window=body.completion_window, metadata=body.metadata
    )
    return BatchObject(**batches.get(who.tenant_id, batch.id))


@router.get("/{batch_id}", response_model=BatchObject)
def get_batch(batch_id: str, batches: BatchesDep, who: BatchesCaller) -> BatchObject:
    return BatchObject(**batches.get(who.tenant_id, batch_id))


@router.get("", response_model=BatchList)
def list_batches(
    batches: BatchesDep,
    who: BatchesCaller,
    after: Annotated[str | None, Query(max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> BatchList:
    rows, more = batches.list_page(who.tenant_id, after=after, limit=limit)
    data = [BatchObject(**r) for r in rows]
    return BatchList(
        data=data, first_id=data[0].id if data else None, last_id=data[-1].id if data else None, has_more=more
    )


@router.post("/{batch_id}/cancel", response_model=BatchObject, responses={409: {"model": ErrorResponse}})
def cancel_batch(batch_id: str, batches: BatchesDep, who: BatchesCaller) -> BatchObject:
    return BatchObject(**batches.cancel(who.tenant_id, batch_id))


@router.post("/{batch_id}/retry", response_model=BatchObject, responses={409: {"model": ErrorResponse}})
def retry_batch(batch_id: str, batches: BatchesDep, who: BatchesCaller) -> BatchObject:
    """A new batch of this ended batch's failed lines; its `metadata.retry_of` names this one."""
    batch = retry_failed(batches, who.tenant_id, batch_id)
    return BatchObject(**batches.get(who.tenant_id, batch.id))
