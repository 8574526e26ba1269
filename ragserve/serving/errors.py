"""What a service refuses, by kind: each transport maps the kind to its own form (an HTTP
status and error body in ragserve.server.errors, a message and exit code in the CLI)."""


class ServiceError(Exception):
    """A refusal; `code` is a stable machine-readable name for it."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class NotFound(ServiceError):
    """Missing, or hidden from the caller: the two are never told apart."""


class Forbidden(ServiceError):
    """Visible to the caller, but its role or the document's ACL does not allow the action."""


class Conflict(ServiceError):
    """The state changed under the request (a delete or an ACL change landed meanwhile)."""


class Invalid(ServiceError):
    """The request can never succeed as sent."""


class Unavailable(ServiceError):
    """Something outside the service that the request needs did not answer (a website being
    synced); the same request may succeed later."""
