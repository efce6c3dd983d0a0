"""The one gate in front of every route: authentication, per-key rate limit, connection limits, unknown
WebSocket paths. An ASGI middleware around the whole router, so a route added anywhere (session mode, dialects,
voices, ...) is behind it without doing anything: there is no per-route opt-in to forget. Only the paths in
`public` (health/metrics, by config) skip it.

What it leaves for the routes (scope["state"], read with `principal_of(request_or_ws)`): the Principal. It also
keeps uvicorn's protocol object of a WebSocket (`protocol_of`: its transport and frame writer), which
api/ws_sender.py uses to close a connection whose client stopped reading.

Refusals use the one error mapping (api/errors.py): HTTP gets the JSON error body; a WebSocket is accepted,
sent the error frame, then closed (1008 auth, 1013 limits) with the reason, because browsers cannot read
the HTTP status of a refused handshake. Imports auth, limits, errors, metrics, Starlette; never an engine.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from starlette.datastructures import Headers, QueryParams
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from realtime_tts.api.errors import _reason, count, error_response, ws_error_frame
from realtime_tts.api.streams import StreamAborted
from realtime_tts.auth import Authenticator, Principal
from realtime_tts.errors import NotFound, TTSError
from realtime_tts.limits import ConnectionLimiter, RateLimiter
from realtime_tts.metrics import Metrics

log = logging.getLogger(__name__)

_PROTOCOL = "realtime_tts.ws_protocol"


def principal_of(conn: Any) -> Principal | None:
    """The Principal the guard let in (a Starlette Request or WebSocket); None for public paths."""
    principal: Principal | None = conn.scope.get("state", {}).get("principal")
    return principal


def protocol_of(conn: Any) -> Any:
    """uvicorn's protocol object under a WebSocket (has .transport), or None where unknown."""
    return conn.scope.get(_PROTOCOL)


def keep_ws_protocol(app: ASGIApp) -> ASGIApp:
    """Outermost middleware: keeps uvicorn's protocol object of a WebSocket in its scope (send is a bound method
    of it here, before any middleware wraps send) for protocol_of."""
    async def asgi(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            scope[_PROTOCOL] = getattr(send, "__self__", None)
        await app(scope, receive, send)
    return asgi


class Guard:
    def __init__(self, app: ASGIApp, *, auth: Authenticator, metrics: Metrics, connections: ConnectionLimiter,
                 rate: RateLimiter, public: frozenset[str], routes: Callable[[], list[Any]]):
        self.app = app
        self.auth = auth
        self.metrics = metrics
        self.connections = connections
        self.rate = rate
        self.public = public
        self.routes = routes  # the router's live route list: unknown WS paths get a proper error frame

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if scope["path"] in self.public:
            await self.app(scope, receive, send)
            return
        try:
            principal = self.auth.authenticate(Headers(scope=scope), QueryParams(scope.get("query_string", b"")))
        except TTSError as e:
            self.metrics.auth_failures_total.labels(reason=e.field or "credentials").inc()
            log.info("refused %s %s: %s", kind, scope["path"], e.message)  # the message never holds a key
            await self._refuse(scope, receive, send, e)
            return
        key = None if principal.anonymous else principal.name
        try:
            if key is not None:
                self.rate.check(key)
            if kind == "websocket" and not any(r.matches(scope)[0] == Match.FULL for r in self.routes()):
                raise NotFound(f"no WebSocket endpoint at {scope['path']!r}; see GET / for the endpoints",
                               field="path")
        except TTSError as e:
            await self._refuse(scope, receive, send, e)
            return
        hit = self.connections.acquire(key)
        if hit is not None:
            await self._refuse(scope, receive, send, self.connections.refusal(hit))
            return
        self.metrics.key_requests_total.labels(key=principal.name).inc()
        log.debug("%s %s as %s (via %s)", kind, scope["path"], principal.name, principal.via)  # the name, never a key
        scope.setdefault("state", {})["principal"] = principal
        self.metrics.connections.inc()
        try:
            await self.app(scope, receive, send)
        except StreamAborted:
            pass  # a streamed body cut on purpose (api/streams.py logged why): the client sees it incomplete
        finally:
            self.metrics.connections.dec()
            self.connections.release(key)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, e: TTSError) -> None:
        if scope["type"] == "http":
            response = error_response(e, self.metrics)
            if e.status == 401:
                response.headers["WWW-Authenticate"] = 'Bearer realm="realtime_tts"'
            await response(scope, receive, send)
            return
        count(e, self.metrics)
        ws = WebSocket(scope, receive, send)
        try:
            await ws.accept()
            await ws.send_text(json.dumps(ws_error_frame(e), separators=(",", ":")))
            await ws.close(e.close_code, reason=_reason(e.message))
        except Exception:  # noqa: BLE001 — the client left during the refusal: nothing more to tell it
            return
        finally:
            self.metrics.ws_closes_total.labels(code=str(e.close_code)).inc()
