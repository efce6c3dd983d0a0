"""One log line per request (HTTP) or connection (WebSocket): ids, outcome and timings, at info level.

Owns the request id: the client's X-Request-Id (e.g. nginx's $request_id) when it sends a sane one, else a new
one; it is set in logs.request_id for every line logged while serving, and returned as X-Request-Id (HTTP
responses without a synthesis; those already carry the synthesis' id there, logged as synth_id) or in the
WebSocket accept headers (x-request-id).
Fields: method/path, status (HTTP) or close code (WS), error code, t_total_ms, first_byte_ms (first body chunk /
first binary frame), bytes_out, frames, context_ids (session mode), and the stats the server sent (ttfa_ms,
audio_duration_ms, engine). Request text is logged only with logging.log_text. Imports logs, config; no engine.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from realtime_tts import logs
from realtime_tts.config import Config

log = logging.getLogger("realtime_tts.access")

_SANE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
_TEXT_LIMIT = 2000
_MAX_CONTEXT_IDS = 32
_STATS_KEYS = ("ttfa_ms", "audio_duration_ms", "engine", "segments", "rtf")


def access_log(app: ASGIApp, cfg: Config) -> ASGIApp:
    if not cfg.logging.log_requests:
        return app
    with_text = cfg.logging.log_text

    async def asgi(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await app(scope, receive, send)
            return
        line = _Line(scope, with_text)
        token = logs.request_id.set(line.request_id)
        try:
            await app(scope, line.receive(receive), line.send(send))
        except BaseException as e:
            line.outcome = line.outcome or type(e).__name__
            raise
        finally:
            line.emit()
            logs.request_id.reset(token)
    return asgi


class _Line:
    def __init__(self, scope: Scope, with_text: bool):
        self.t0 = time.perf_counter()
        self.ws = scope["type"] == "websocket"
        headers = dict(scope.get("headers") or [])
        given = headers.get(b"x-request-id", b"").decode("latin-1")
        self.request_id = given if _SANE_ID.match(given) else uuid.uuid4().hex[:16]
        self.fields: dict[str, Any] = {"request_id": self.request_id, "kind": "ws" if self.ws else "http",
                                       "method": scope.get("method", "WS"), "path": scope.get("path", "")}
        self.with_text = with_text
        self.text: str | None = None
        self.outcome: str | None = None
        self.first_byte_ms: float | None = None
        self.bytes_out = 0
        self.frames = 0
        self.context_ids: list[str] = []

    def receive(self, receive: Receive) -> Receive:
        async def wrapped() -> Message:
            msg = await receive()
            if msg["type"] == "websocket.receive" and msg.get("text"):
                text = msg["text"]
                if "context_id" in text and len(self.context_ids) < _MAX_CONTEXT_IDS:
                    cid = _json(text).get("context_id")
                    if isinstance(cid, str) and cid not in self.context_ids:
                        self.context_ids.append(cid[:64])
                if self.with_text and self.text is None:
                    self.text = text[:_TEXT_LIMIT]
            elif msg["type"] == "http.request" and self.with_text and self.text is None:
                self.text = msg.get("body", b"")[:_TEXT_LIMIT].decode(errors="replace")
            return msg
        return wrapped

    def send(self, send: Send) -> Send:
        async def wrapped(msg: Message) -> None:
            kind = msg["type"]
            if kind == "http.response.start":
                self.fields["status"] = msg["status"]
                hdrs = dict(msg.get("headers") or [])
                if b"x-request-id" in hdrs:
                    self.fields["synth_id"] = hdrs[b"x-request-id"].decode("latin-1")
                    self._stats(_json(hdrs.get(b"x-stats", b"").decode("latin-1")))
                else:  # no synthesis id (that is logged as synth_id): the response carries ours
                    msg = {**msg, "headers": [*(msg.get("headers") or []), (b"x-request-id", self.request_id.encode())]}
            elif kind == "http.response.body":
                self._out(len(msg.get("body", b"")), binary=True)
                if self.fields.get("status", 200) >= 400 and msg.get("body"):
                    self._error(_json(msg["body"].decode(errors="replace")))
            elif kind == "websocket.accept":
                msg = {**msg, "headers": [*(msg.get("headers") or []), (b"x-request-id", self.request_id.encode())]}
            elif kind == "websocket.send":
                if msg.get("bytes") is not None:
                    self._out(len(msg["bytes"]), binary=True)
                else:
                    text = msg.get("text") or ""
                    self._out(len(text), binary=False)
                    if '"error"' in text or '"done"' in text:
                        obj = _json(text)
                        self._error(obj)
                        self._stats(obj.get("stats"))
            elif kind == "websocket.close":
                self.fields["close_code"] = msg.get("code", 1000)
            await send(msg)
        return wrapped

    def _out(self, n: int, *, binary: bool) -> None:
        if binary and n and self.first_byte_ms is None:
            self.first_byte_ms = round((time.perf_counter() - self.t0) * 1e3, 1)
        self.bytes_out += n
        self.frames += 1

    def _error(self, obj: dict[str, Any]) -> None:
        err = obj.get("error") if isinstance(obj.get("error"), dict) else obj if obj.get("type") == "error" else None
        if isinstance(err, dict) and "code" in err and "error_code" not in self.fields:
            self.fields["error_code"] = err["code"]

    def _stats(self, stats: Any) -> None:
        if isinstance(stats, dict) and not stats.get("partial"):  # a streamed response's headers: totals unknown
            self.fields.update({k: stats[k] for k in _STATS_KEYS if k in stats})

    def emit(self) -> None:
        f = self.fields
        if self.ws and "close_code" not in f:
            f["close_code"] = 1006 if self.outcome is None else None  # the client left before a close frame
        ok = (f.get("status", 200) < 400) if not self.ws else f.get("close_code") in (1000, None)
        f["outcome"] = self.outcome or ("ok" if ok and "error_code" not in f else f.get("error_code", "error"))
        f["t_total_ms"] = round((time.perf_counter() - self.t0) * 1e3, 1)
        f["first_byte_ms"] = self.first_byte_ms
        f["bytes_out"], f["frames"] = self.bytes_out, self.frames
        if self.context_ids:
            f["context_ids"] = self.context_ids
        if self.text is not None:
            f["text"] = self.text
        what = f"{f['method']} {f['path']}"
        log.info("%s %s %s", what, f.get("status", f.get("close_code")), f["outcome"], extra=f)


def _json(text: str) -> dict[str, Any]:
    try:
        obj = json.loads(text) if text else {}
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}
