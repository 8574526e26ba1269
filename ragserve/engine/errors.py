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


class EngineDeadError(RuntimeError):
    """The engine stopped (a step failed, or a replica is gone); nothing more will run."""


def check_token_ids(token_ids: list[int], vocab_size: int) -> None:
    """Raise InvalidRequestError unless every id is in the model's vocabulary."""
    if any(not 0 <= t < vocab_size for t in token_ids):
        raise InvalidRequestError(f"prompt token ids must lie in [0, {vocab_size})")
