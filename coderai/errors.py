"""One rooted exception tree. Each class carries the HTTP status and OpenAI error type that
the front answers with; only the front maps them to HTTP."""

from __future__ import annotations

import re


class CoderaiError(Exception):
    status = 500
    error_type = "server_error"
    code: str | None = None
    #: the connection is closed after this error's answer
    close_connection = False

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def headers(self) -> dict[str, str]:
        """HTTP headers that belong with this error (Retry-After, WWW-Authenticate)."""
        return {}

    def envelope(self) -> dict[str, object]:
        """The OpenAI error object: {"error": {message, type, param, code}}."""
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }


class InvalidRequest(CoderaiError):
    status = 400
    error_type = "invalid_request_error"


class ContextLengthExceeded(InvalidRequest):
    """A prompt that leaves the model no room to answer. The code and wording are
    OpenAI's, which agents (Cline, litellm) look for to shorten a conversation and retry."""

    code = "context_length_exceeded"

    @staticmethod
    def wording(context: int, tokens: int, what: str) -> str:
        return (
            f"This model's maximum context length is {context} tokens. However, your {what}"
            f" resulted in {tokens} tokens. Please reduce the length of the {what}."
        )

    def counts(self) -> tuple[int, int] | None:
        """(prompt tokens, context) read back from the wording, which crossed the bus as
        text; None for a message not in it."""
        found = _CONTEXT_COUNTS.search(self.message)
        return (int(found[2]), int(found[1])) if found else None

    def anthropic_message(self) -> str:
        """Anthropic's wording, which Claude Code looks for to compact a conversation."""
        counts = self.counts()
        if counts is None:
            return self.message
        return f"prompt is too long: {counts[0]} tokens > {counts[1]} maximum"


_CONTEXT_COUNTS = re.compile(
    r"maximum context length is (\d+) tokens\. However, your \w+ resulted in (\d+) tokens"
)


class UnreadableBody(InvalidRequest):
    """A body that cannot be read (e.g. labelled gzip and not gzip): what follows it on
    the connection cannot be trusted either, so the connection is closed after the answer."""

    close_connection = True


class Unauthorized(CoderaiError):
    status = 401
    error_type = "authentication_error"
    code = "invalid_admin_key"

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": "Bearer"}


class InvalidApiKey(Unauthorized):
    code = "invalid_api_key"


class WrongPassword(Unauthorized):
    code = "invalid_credentials"

    def headers(self) -> dict[str, str]:
        return {}  # a console login, not a bearer challenge


class Forbidden(CoderaiError):
    """Known credentials that may not do this (a key limited to other models, a console
    request without its CSRF token)."""

    status = 403
    error_type = "permission_error"
    code = "forbidden"


class ModelNotAllowed(Forbidden):
    code = "model_not_allowed"


class NotFound(CoderaiError):
    status = 404
    error_type = "invalid_request_error"
    code = "not_found"


class Conflict(CoderaiError):
    status = 409
    error_type = "invalid_request_error"
    code = "conflict"


class ModelNotFound(NotFound):
    code = "model_not_found"


class TooManyRequests(CoderaiError):
    status = 429
    error_type = "rate_limit_error"
    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = max(1, retry_after)

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


class QueueFull(TooManyRequests):
    code = "queue_full"


class LoginLocked(TooManyRequests):
    code = "login_locked"


class BudgetExhausted(TooManyRequests):
    """An API key has used its tokens for the day or month. OpenAI answers a spent quota
    with this type and code, which agents (Codex) read as "do not retry"."""

    error_type = "insufficient_quota"
    code = "insufficient_quota"

    def headers(self) -> dict[str, str]:
        # the official SDKs retry a 429 unless told not to; this one lasts until the reset
        return {**super().headers(), "x-should-retry": "false"}


class NoEngine(CoderaiError):
    """No running engine can serve the request (none compatible, or none alive in time)."""

    status = 503
    error_type = "server_error"
    code = "no_engine"


class ShuttingDown(NoEngine):
    """The server stopped before the request could finish."""

    code = "shutting_down"


class StreamStalled(CoderaiError):
    """The client stopped reading a stream for longer than server.stream_stall_timeout."""

    status = 408
    error_type = "timeout_error"
    code = "stream_stalled"


class EngineFailed(CoderaiError):
    """The engine accepted the job and then failed it, or died while running it."""

    status = 503
    error_type = "server_error"
    code = "engine_failed"


class ModelFileError(CoderaiError):
    """The model's file is missing, unreadable or not a format we can run."""

    status = 503
    code = "model_file_error"


class NotAFileOrFolder(ModelFileError):
    """The model's path names a FIFO, socket or device: reading one can wait forever or
    have side effects, so a catalogue that names one is refused when it is saved."""


class ConfigError(CoderaiError):
    """A configuration or catalogue file is unreadable or invalid."""


class BusProtocolError(CoderaiError):
    """A bus frame that is malformed, of an unknown type or of another protocol version."""


class JobError(CoderaiError):
    """A job an engine cannot run (bad parameters, model that fails to load)."""

    def __init__(self, message: str, *, kind: str = "backend_error") -> None:
        super().__init__(message)
        self.kind = kind


class ProtocolVersionMismatch(BusProtocolError):
    """A peer speaks another version of the bus protocol."""
