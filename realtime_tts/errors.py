"""The one exception tree: each class knows its HTTP status, WS close code and wire error code.

Leaf module: imports nothing from the package.
"""

from __future__ import annotations


class TTSError(Exception):
    """Base of every error the server reports to a client."""

    status: int = 500
    close_code: int = 1011
    code: str = "internal"
    retryable: bool = False

    def __init__(self, message: str, *, field: str | None = None, retry_after_ms: int | None = None,
                 limit: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        self.retry_after_ms = retry_after_ms
        self.limit = limit  # the configured limit this refusal hit (counted in limit_refusals_total), if any

    def to_dict(self) -> dict[str, object]:
        body: dict[str, object] = {"code": self.code, "message": self.message, "retryable": self.retryable}
        if self.field is not None:
            body["field"] = self.field
        if self.retry_after_ms is not None:
            body["retry_after_ms"] = self.retry_after_ms
        return body


class BadRequest(TTSError):
    """A request field is missing, of the wrong type or out of range (message names the field)."""

    status = 400
    close_code = 1008
    code = "bad_request"


class UnsupportedFrame(TTSError):
    """A WebSocket frame that is not JSON text where JSON text was expected."""

    status = 400
    close_code = 1003
    code = "unsupported_data"


class UnsupportedVoiceMode(BadRequest):
    """The chosen engine cannot do this voice mode (e.g. clone on the CPU voice)."""

    code = "unsupported_voice_mode"


class NotFound(TTSError):
    status = 404
    close_code = 1008
    code = "not_found"


class PayloadTooLarge(TTSError):
    status = 413
    close_code = 1009
    code = "too_large"


class Unauthorized(TTSError):
    """No credentials, or credentials that are wrong or expired (the message says which, never the key)."""

    status = 401
    close_code = 1008
    code = "unauthorized"


class RateLimited(TTSError):
    """Too many requests for one API key: retry after retry_after_ms."""

    status = 429
    close_code = 1013
    code = "rate_limited"
    retryable = True


class Overloaded(TTSError):
    """Admission refused: queues are full. Clients should retry after retry_after_ms."""

    status = 503
    close_code = 1013
    code = "overloaded"
    retryable = True


class TooManyConnections(Overloaded):
    """A connection limit (in total or per key) is reached."""

    code = "too_many_connections"


class EngineUnavailable(TTSError):
    """The engine is loading or has failed; /health tells which."""

    status = 503
    close_code = 1011
    code = "engine_unavailable"
    retryable = True


class EngineDead(EngineUnavailable):
    """The worker running this request died; only its in-flight requests fail, the worker restarts."""

    code = "engine_dead"


class IdleTimeout(TTSError):
    """A WebSocket client sent nothing for too long while the server waited for it."""

    status = 408
    close_code = 4008
    code = "idle_timeout"


class Cancelled(TTSError):
    """The request was cancelled by the client (not an error on the wire; a terminal reason)."""

    status = 499
    close_code = 1000
    code = "cancelled"


class TooManyContexts(TTSError):
    """A session-mode socket already holds its max_contexts live contexts (the socket stays open)."""

    status = 429
    close_code = 1008
    code = "too_many_contexts"
    retryable = True


class SlowReader(TTSError):
    """A WebSocket client stopped reading the audio sent to it (send blocked past the send timeout)."""

    status = 408
    close_code = 1008
    code = "slow_reader"


class ShuttingDown(TTSError):
    """The server is draining for shutdown (SIGTERM): new requests are refused, and streams still running when
    the drain timeout ends are closed with this. Retry on another replica."""

    status = 503
    close_code = 1001  # RFC 6455 "going away"
    code = "shutting_down"
    retryable = True
