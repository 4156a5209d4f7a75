"""Dependencies every route shares: the service objects and the calling tenant (key + scope check)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.errors import AuthError
from conductor.app.api_service import ApiService
from conductor.app.batches.batch_api import Batches
from conductor.app.tenants import Principal, verify_key

_bearer = HTTPBearer(auto_error=False)


def get_api(request: Request) -> ApiService:
    return request.app.state.api  # type: ignore[no-any-return]


def get_batches(request: Request) -> Batches:
    return request.app.state.batches  # type: ignore[no-any-return]


def _principal(request: Request, creds: HTTPAuthorizationCredentials | None) -> Principal:
    if creds is None or not creds.credentials:
        raise AuthError("missing API key: send 'Authorization: Bearer <key>'")
    principal = verify_key(request.app.state.api.sessions, creds.credentials)
    if principal is None:
        raise AuthError("invalid, revoked or expired API key")
    return principal


def scoped(scope: str):  # type: ignore[no-untyped-def]
    """A dependency that admits keys holding `scope`."""

    def check(request: Request, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> Principal:
        principal = _principal(request, creds)
        if scope not in principal.scopes:
            raise AuthError(f"this key lacks the {scope!r} scope", status=403)
        return principal

    return check


Api = Annotated[ApiService, Depends(get_api)]
BatchesDep = Annotated[Batches, Depends(get_batches)]
ModelsCaller = Annotated[Principal, Depends(scoped("models"))]
ChatCaller = Annotated[Principal, Depends(scoped("chat"))]
JobsCaller = Annotated[Principal, Depends(scoped("jobs"))]
FilesCaller = Annotated[Principal, Depends(scoped("files"))]
BatchesCaller = Annotated[Principal, Depends(scoped("batches"))]
