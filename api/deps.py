"""Dependencies every route shares: the service objects and the calling tenant (key + scope check)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Protocol

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.errors import AuthError
from conductor.app.batches.batch_api import Batches
from conductor.app.tenant_jobs import TenantJobs
from conductor.app.tenants import ADMIN_SCOPE, Principal, verify_key
from conductor.domain.problem import Problem

_bearer = HTTPBearer(auto_error=False)


def get_api(request: Request) -> TenantJobs:
    return request.app.state.api  # type: ignore[no-any-return]


def get_batches(request: Request) -> Batches:
    return request.app.state.batches  # type: ignore[no-any-return]


class Estimate(Protocol):
    """`conductor.app.estimate.estimate` over the process's store, pool and settings."""

    def __call__(
        self, problems: Iterable[Problem], *, effort: str | None = None, samples: int | None = None
    ) -> dict[str, Any]: ...


def get_estimate(request: Request) -> Estimate:
    return request.app.state.estimate  # type: ignore[no-any-return]


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


Api = Annotated[TenantJobs, Depends(get_api)]
BatchesDep = Annotated[Batches, Depends(get_batches)]
Estimator = Annotated[Estimate, Depends(get_estimate)]
ModelsCaller = Annotated[Principal, Depends(scoped("models"))]
ChatCaller = Annotated[Principal, Depends(scoped("chat"))]
JobsCaller = Annotated[Principal, Depends(scoped("jobs"))]
FilesCaller = Annotated[Principal, Depends(scoped("files"))]
BatchesCaller = Annotated[Principal, Depends(scoped("batches"))]
#: An operator: a key with the `admin` scope (never given by default), whatever tenant holds it.
AdminCaller = Annotated[Principal, Depends(scoped(ADMIN_SCOPE))]
