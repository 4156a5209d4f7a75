"""OpenAI Files API: uploads are copied to disk in chunks and read back as a stream."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Form, UploadFile
from fastapi.responses import StreamingResponse

from api.deps import BatchesDep, FilesCaller
from api.schemas.common import ErrorResponse
from api.schemas.files import FileObject
from conductor.domain.errors import InputError
from conductor.store.models import File

router = APIRouter(prefix="/v1/files", tags=["files"], responses={404: {"model": ErrorResponse}})
CHUNK = 1 << 20


def _object(row: File) -> FileObject:
    created = row.created_at if row.created_at.tzinfo else row.created_at.replace(tzinfo=UTC)
    return FileObject(
        id=row.id, bytes=row.bytes, created_at=int(created.timestamp()), filename=row.filename, purpose=row.purpose
    )


@router.post("", response_model=FileObject, responses={400: {"model": ErrorResponse}})
def upload_file(file: UploadFile, purpose: Annotated[str, Form()], batches: BatchesDep, who: FilesCaller) -> FileObject:
    if purpose != "batch":
        raise InputError(f"purpose {purpose!r} is not supported; use 'batch'")

    def chunks() -> Iterator[bytes]:
        while data := file.file.read(CHUNK):  # starlette spooled the upload to a temporary file
            yield data

    return _object(batches.save_file(who.tenant_id, file.filename or "upload.jsonl", purpose, chunks()))


@router.get("/{file_id}", response_model=FileObject)
def get_file(file_id: str, batches: BatchesDep, who: FilesCaller) -> FileObject:
    return _object(batches.file(who.tenant_id, file_id))


@router.get(
    "/{file_id}/content",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/octet-stream": {}}}},
)
def file_content(file_id: str, batches: BatchesDep, who: FilesCaller) -> StreamingResponse:
    row = batches.file(who.tenant_id, file_id)

    def read() -> Iterator[bytes]:
        with Path(row.path).open("rb") as fh:
            while data := fh.read(CHUNK):
                yield data

    return StreamingResponse(read(), media_type="application/octet-stream")
