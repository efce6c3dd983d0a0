"""The ONE mapping of errors.TTSError to HTTP responses, WebSocket error frames and close codes."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from realtime_tts.errors import TTSError
from realtime_tts.metrics import Metrics

_WS_REASON_BYTES = 123  # RFC 6455: a close reason fits in 123 bytes


def error_body(e: TTSError) -> dict[str, Any]:
    return {"error": e.to_dict()}


def count(e: TTSError, metrics: Metrics) -> None:
    """Every error reported to a client, once: errors_total{code}, and limit_refusals_total{limit} when it was a
    configured limit that refused."""
    metrics.errors_total.labels(code=e.code).inc()
    if e.limit is not None:
        metrics.limit_refusals_total.labels(limit=e.limit).inc()


def error_response(e: TTSError, metrics: Metrics | None = None) -> JSONResponse:
    if metrics is not None:
        count(e, metrics)
    # whole seconds, rounded up: a client that waits what it is told is never early
    headers = {"Retry-After": str(max(1, -(-e.retry_after_ms // 1000)))} if e.retry_after_ms else None
    return JSONResponse(error_body(e), status_code=e.status, headers=headers)


def close_code(e: TTSError) -> int:
    return e.close_code


def ws_error_frame(e: TTSError) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": "error", **e.to_dict(), "fatal": True}
    return frame


def _reason(message: str) -> str:
    raw = message.encode()[:_WS_REASON_BYTES]
    return raw.decode(errors="ignore")
