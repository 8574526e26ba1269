"""FastAPI dependencies the routes share: the server state and the authenticated principal."""

from fastapi import Request
from starlette.datastructures import Headers

from ragserve.access import Principal, Role
from ragserve.server.errors import APIError, Rejection, from_limit
from ragserve.server.limits import LimitExceeded
from ragserve.server.state import ServerState


def server_state(request: Request) -> ServerState:
    return request.app.state.ragserve


# Where RequestGate leaves the principal it authenticated, for the route's dependency.
PRINCIPAL_SCOPE_KEY = "ragserve.principal"


def authenticate(state: ServerState, headers: Headers, client: str) -> Principal:
    """The principal of a request's bearer key; a 401 without a valid, unrevoked key, and a
    429 for a client that sent too many invalid keys in the last minute.

    Run on the event loop: the key lookup is one indexed SQLite read of microseconds, while a
    worker thread's round trip needs the GIL twice more, each time waiting for a kernel of the
    engine thread to end (in the 60 s soak a refusal's p50 went from 10-10.5 ms to 7-9 ms)."""
    scheme, _, key = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise APIError(
            401,
            "missing API key: send Authorization: Bearer <key>",
            "authentication_error",
            "missing_api_key",
            rejection=Rejection.UNAUTHENTICATED,
        )
    try:
        state.auth_throttle.check(client)
    except LimitExceeded as error:
        raise from_limit(error) from error
    found = state.keys.authenticate(key.strip())
    if found is None:
        state.auth_throttle.record_failure(client)
        raise APIError(
            401,
            "invalid or revoked API key",
            "authentication_error",
            "invalid_api_key",
            rejection=Rejection.UNAUTHENTICATED,
        )
    return found


async def principal(request: Request) -> Principal:
    """The request's principal: the one RequestGate authenticated before reading the body (each
    keyed route's request passes there first), else authenticated here."""
    found = request.scope.get(PRINCIPAL_SCOPE_KEY)
    if isinstance(found, Principal):
        return found
    client = request.client.host if request.client else "unknown"
    return authenticate(server_state(request), request.headers, client)


def require_admin(who: Principal, what: str) -> None:
    """403 unless the key is an administrator's; `what` names the thing refused."""
    if who.role is not Role.ADMIN:
        raise APIError(
            403,
            f"{what} is for administrators; this key's role is {who.role.value}",
            "permission_error",
            "forbidden",
        )
