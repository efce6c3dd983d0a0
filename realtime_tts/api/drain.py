"""Graceful shutdown's web side: an ASGI gate that tracks every in-flight HTTP request and WebSocket, refuses new
ones while draining, and closes those still running when the drain time is over.

Owns: the draining flag, the set of live connections, the shutting_down error on the wire (HTTP 503 +
Retry-After, WS error frame then close 1001) and GET /health's 503 "draining" (load balancers stop routing here).
The uvicorn side (signals, listening sockets, transports, the engine pool's stop) is realtime_tts/lifecycle.py.
Imports errors and api.errors only; never an engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from realtime_tts.api.errors import _reason, error_body, ws_error_frame
from realtime_tts.errors import ShuttingDown

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Live:
    """One in-flight request (HTTP) or connection (WebSocket)."""

    kind: str  # "http" | "websocket"
    send: Send
    task: asyncio.Task[None] | None = None
    heard: bool = False  # WS: a frame came from the client (a request is under way)
    accepted: bool = False  # WS accepted / HTTP response started
    finished: bool = False  # WS close sent / HTTP response body complete
    expired: bool = False
    grace: float = 0.0  # set with expired: how long the close may take
    done: asyncio.Event = field(default_factory=asyncio.Event)


class Drain:
    """Shared by the gate (one per app) and the server's shutdown sequence."""

    def __init__(self) -> None:
        self.draining = False
        self.live: set[_Live] = set()
        self.started_at = 0.0

    def gate(self, app: ASGIApp) -> ASGIApp:
        async def asgi(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] not in ("http", "websocket"):
                await app(scope, receive, send)
            elif self.draining:
                await _refuse(scope, receive, send)
            else:
                await self._run(app, scope, receive, send)
        return asgi

    async def _run(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        live = _Live(scope["type"], send)

        async def tracked_receive() -> Message:
            msg = await receive()
            if msg["type"] == "websocket.receive":
                live.heard = True
            return msg

        async def tracked_send(msg: Message) -> None:
            kind = msg["type"]
            if kind in ("websocket.accept", "http.response.start"):
                live.accepted = True
            elif kind == "websocket.close" or (kind == "http.response.body" and not msg.get("more_body")):
                live.finished = True
            await send(msg)

        live.task = asyncio.create_task(app(scope, tracked_receive, tracked_send))  # type: ignore[arg-type]
        self.live.add(live)
        try:
            await live.task
        except asyncio.CancelledError:
            if not live.expired:
                raise
            if not live.finished:  # here, before uvicorn sees the app return and closes the transport
                await _close(live)
        finally:
            self.live.discard(live)
            live.done.set()

    def begin(self) -> None:
        """Start draining: new requests are refused; WebSockets that have not sent a request yet close now."""
        self.draining, self.started_at = True, time.monotonic()
        idle = [c for c in self.live if c.kind == "websocket" and not c.heard]
        log.info("draining: %d in flight (%d idle WebSockets closed now)", len(self.live) - len(idle), len(idle))
        for c in idle:
            asyncio.create_task(self._expire(c, 0.5))

    async def wait(self, timeout: float, forced: Callable[[], bool]) -> bool:
        """Wait until nothing is in flight (True) or the timeout passes or forced() says stop (False)."""
        deadline = time.monotonic() + timeout
        while self.live:
            if forced() or time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    async def expire_all(self, grace: float) -> None:
        """Close everything still in flight: cancel its work, then a shutting_down error and close 1001, each
        connection given `grace` seconds to take them (a client that stopped reading gets reset by the caller)."""
        remaining = list(self.live)
        if remaining:
            log.warning("drain time over: closing %d request(s) still in flight", len(remaining))
        await asyncio.gather(*(self._expire(c, grace) for c in remaining))

    async def _expire(self, live: _Live, grace: float) -> None:
        live.expired, live.grace = True, grace
        if live.task is not None:
            live.task.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(live.done.wait(), grace + 1)


async def _close(live: _Live) -> None:
    """A shutting_down error on the wire for a request cut by the drain's end."""
    err = ShuttingDown("the server is shutting down; retry on another replica")
    try:
        async with asyncio.timeout(live.grace):
            if live.kind == "websocket" and live.accepted:
                await live.send({"type": "websocket.send", "text": json.dumps(ws_error_frame(err))})
                await live.send({"type": "websocket.close", "code": err.close_code, "reason": _reason(err.message)})
            elif live.kind == "websocket":
                await live.send({"type": "websocket.close", "code": err.close_code})
            elif not live.accepted:
                await _send_error(live.send, err)
            # an HTTP response already under way cannot say why: it ends short (the client sees a cut stream)
    except (TimeoutError, OSError, RuntimeError) as e:  # not reading, or gone: the server resets the socket
        log.info("close after drain not delivered (%s)", type(e).__name__)


async def _refuse(scope: Scope, receive: Receive, send: Send) -> None:
    err = ShuttingDown("the server is shutting down; retry on another replica", retry_after_ms=1000)
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.close", "code": err.close_code})
    elif scope.get("path") == "/health":
        await _send_json(send, 503, {"status": "draining"})
    else:
        await _send_error(send, err)


async def _send_error(send: Send, err: ShuttingDown) -> None:
    await _send_json(send, err.status, error_body(err), [(b"retry-after", b"1"), (b"connection", b"close")])


async def _send_json(send: Send, status: int, body: dict[str, Any],
                     headers: list[tuple[bytes, bytes]] | None = None) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": data})
