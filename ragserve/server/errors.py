"""Every refusal the server makes, in one place: APIError (an OpenAI-style error body with its
status and, where it applies, Retry-After), the typed reasons that ragserve:requests_rejected
counts, and the one mapping from engine, per-user limit and service errors to HTTP.

The app's exception handler turns an APIError into its response and counts its rejection, so
routes raise and never count by hand.
"""

from enum import StrEnum
from typing import Any

from ragserve.engine.errors import EngineDeadError, EngineError, EngineOverloadedError
from ragserve.server.limits import LimitExceeded
from ragserve.serving.errors import (
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    ServiceError,
    Unavailable,
)


class Rejection(StrEnum):
    """Why a request was refused (the `reason` label of ragserve:requests_rejected)."""

    INVALID = "invalid"
    UNAUTHENTICATED = "unauthenticated"
    AUTH_FAILURES = "auth_failures"
    PER_USER_CONCURRENCY = "per_user_concurrency"
    PER_USER_TOKENS = "per_user_tokens"
    QUEUE_FULL = "queue_full"


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        type_: str,
        code: str,
        retry_after_s: float | None = None,
        param: str | None = None,
        rejection: Rejection | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.code = code
        self.retry_after_s = retry_after_s
        self.param = param
        self.rejection = rejection

    def headers(self) -> dict[str, str]:
        if self.retry_after_s is None:
            return {}
        return {"Retry-After": str(max(1, round(self.retry_after_s)))}


def error_body(
    message: str, type_: str, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def invalid(message: str, code: str, param: str | None = None) -> APIError:
    """A 400 for a request that can never succeed as sent."""
    return APIError(
        400, message, "invalid_request_error", code, param=param, rejection=Rejection.INVALID
    )


def from_engine(error: EngineError | EngineDeadError) -> APIError:
    """The engine's refusal as HTTP: a full queue is a 503 to retry, a dead engine a 503, a
    request the engine cannot run its own status (400 for invalid requests)."""
    if isinstance(error, EngineOverloadedError):
        return APIError(
            503,
            str(error),
            "server_error",
            "overloaded",
            error.retry_after_s,
            rejection=Rejection.QUEUE_FULL,
        )
    if isinstance(error, EngineDeadError):
        return APIError(503, str(error), "server_error", "engine_dead")
    return APIError(
        error.status_code,
        str(error),
        "invalid_request_error",
        "invalid_request",
        rejection=Rejection.INVALID,
    )


SERVICE_STATUSES: dict[type[ServiceError], tuple[int, str]] = {
    NotFound: (404, "invalid_request_error"),
    Forbidden: (403, "permission_error"),
    Conflict: (409, "invalid_request_error"),
    Invalid: (400, "invalid_request_error"),
    Unavailable: (502, "server_error"),
}


def from_service(error: ServiceError) -> APIError:
    """A service's refusal as HTTP: its kind decides the status, its code is kept."""
    status, type_ = SERVICE_STATUSES[type(error)]
    rejection = Rejection.INVALID if status == 400 else None
    return APIError(status, error.message, type_, error.code, rejection=rejection)


def from_limit(error: LimitExceeded) -> APIError:
    reason = Rejection(error.limit)
    return APIError(
        429, error.message, "rate_limit_error", reason.value, error.retry_after_s, rejection=reason
    )
