"""Simple mode (PROTOCOL.md §1): one utterance per WebSocket, LunaVox-compatible.

Owns SimpleStream: WS /v1/stream (the whole text in the first frame) and WS /v1/stream/text (text chunks,
flush, end, cancel with played_ms), read as events. Imports websockets and the client's own modules only.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, Self

import websockets
from websockets.exceptions import ConnectionClosed

from realtime_tts_client.audio import AudioFormat
from realtime_tts_client.events import Done, Event, ServerError, TTSServerError, parse_binary, parse_json
from realtime_tts_client.result import Result, collect


class SimpleStream:
    """One simple-mode connection. Use as `async with await SimpleStream.open(...) as s:`; iterate it for
    events (Audio, and SegmentStart/SegmentEnd with events=True) up to and including Done. An error frame
    raises TTSServerError from the iteration."""

    def __init__(self, ws: websockets.ClientConnection, incremental: bool) -> None:
        self.ws = ws
        self.incremental = incremental
        self.t0 = time.perf_counter()
        self.format = AudioFormat()  # simple mode is always pcm_s16le; the rate comes with Done
        self.done: Done | None = None

    @classmethod
    async def open(cls, ws_base: str, *, text: str | None = None, incremental: bool = True,
                   open_timeout: float = 30.0, **fields: Any) -> Self:
        """Connect and send the first frame. /v1/stream needs `text`; /v1/stream/text takes it as its first
        chunk. `fields` are the request fields of PROTOCOL.md §4 (voice, seed, speed, events, ...)."""
        if not incremental and not text:
            raise ValueError("WS /v1/stream needs the whole text in its first frame")
        path = "/v1/stream/text" if incremental else "/v1/stream"
        ws = await websockets.connect(ws_base + path, max_size=None, open_timeout=open_timeout)
        stream = cls(ws, incremental)
        first = {k: v for k, v in fields.items() if v is not None}
        if text:
            first["text"] = text
        await stream._send(first)
        return stream

    async def _send(self, obj: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(obj, separators=(",", ":")))

    async def send(self, text: str) -> None:
        """Append text verbatim (the caller supplies the spaces, as an LLM's tokens do)."""
        if text:
            await self._send({"text": text})

    text = send  # the same name as Context.text, so callers can drive either mode

    async def flush(self) -> None:
        await self._send({"flush": True})

    async def end(self) -> None:
        await self._send({"end": True})

    async def cancel(self, played_ms: float | None = None, *, wait: bool = False) -> None:
        """Stop now; with played_ms (what the listener heard) the server can answer text_spoken. Never waits:
        the terminal frame (reason "cancelled") comes through events() (`wait` mirrors Context.cancel)."""
        msg: dict[str, Any] = {"cancel": True}
        if played_ms is not None:
            msg["played_ms"] = round(played_ms)
        try:
            await self._send(msg)
        except ConnectionClosed:  # already finished: cancel is idempotent
            pass

    async def events(self) -> AsyncIterator[Event]:
        try:
            async for msg in self.ws:
                if isinstance(msg, bytes):
                    yield parse_binary(msg, session=False)[1]
                    continue
                ev = parse_json(json.loads(msg))
                if isinstance(ev, ServerError):
                    raise TTSServerError(ev)
                if isinstance(ev, Done):
                    self.done = ev
                    if ev.sample_rate:
                        self.format = AudioFormat(self.format.encoding, ev.sample_rate)
                    yield ev
                    return
                yield ev
        except ConnectionClosed as e:
            if self.done is None:
                code = e.rcvd.code if e.rcvd else None
                raise TTSServerError(ServerError("closed", e.rcvd.reason if e.rcvd else str(e)), code) from None

    def __aiter__(self) -> AsyncIterator[Event]:
        return self.events()

    async def collect(self) -> Result:
        return await collect(self.events(), self.format, self.t0)

    async def close(self) -> None:
        await self.ws.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()
