"""Errors the engine raises for requests it will not take.

Each carries the HTTP status the server maps it to, so the mapping lives in one place.
"""


class EngineError(Exception):
    status_code = 500


class InvalidRequestError(EngineError, ValueError):
    """The request can never be served as given (bad parameters, too long, empty)."""

    status_code = 400


class EngineOverloadedError(EngineError):
    """The queue is full right now; the same request may succeed later."""

    status_code = 503

    def __init__(self, message: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ModelNotFoundError(EngineError, ValueError):
    status_code = 404


class UnsupportedModelError(EngineError, ValueError):
    status_code = 400
