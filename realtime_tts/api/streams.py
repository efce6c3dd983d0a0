"""What happens to a streamed HTTP response (chunked audio or SSE) after its headers went out: an engine error
becomes an SSE error event, or cuts a raw audio stream (the only way left to tell the client it is incomplete:
no terminating chunk); a client that leaves early is counted (http_stream_aborts_total).

Used by api/http.py around its body generators; api/guard.py swallows StreamAborted so the cut is one warning
line, not a traceback. Imports errors, metrics and api.errors; never an engine."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from realtime_tts.api.errors import count, error_body
from realtime_tts.errors import TTSError
from realtime_tts.metrics import Metrics

log = logging.getLogger(__name__)


class StreamAborted(Exception):
    """A streamed response could not be finished (its headers were sent): the connection is cut."""


@contextlib.asynccontextmanager
async def watched_stream(metrics: Metrics, endpoint: str, *, sse: bool) -> AsyncIterator[None]:
    """Around the body of a streamed response. A TTSError: for SSE re-raised (the caller sends it as an error
    event), for raw audio reported and turned into StreamAborted. A client that leaves (the generator is
    closed or cancelled) is counted."""
    try:
        yield
    except TTSError as e:
        count(e, metrics)
        if sse:
            raise
        log.warning("%s: stream cut after its headers: %s (%s)", endpoint, e.message, e.code)
        raise StreamAborted(e.message) from None
    except (GeneratorExit, asyncio.CancelledError):
        metrics.http_stream_aborts_total.labels(endpoint=endpoint).inc()
        raise


def sse_error(e: TTSError) -> dict[str, object]:
    """The SSE event for an error after the stream started: {"type": "error", "error": {code, message, ...}}."""
    return {"type": "error", **error_body(e)}
