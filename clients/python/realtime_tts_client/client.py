"""The entry points: Client (one server, every mode) and synthesize (the sync one-shot helper).

Owns server-address handling and the HTTP side a client needs (voices, health). Imports httpx and the client's
own modules; never the server package.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from realtime_tts_client.audio import AudioFormat
from realtime_tts_client.result import Result
from realtime_tts_client.session import Session
from realtime_tts_client.simple import SimpleStream

DEFAULT_SERVER = "127.0.0.1:8000"


def base_urls(server: str) -> tuple[str, str]:
    """'host:port', 'http(s)://host:port' or 'ws(s)://host:port' → (http base, ws base)."""
    s = server.rstrip("/")
    if "://" not in s:
        s = "http://" + s
    scheme, rest = s.split("://", 1)
    secure = scheme in ("https", "wss")
    return ("https://" if secure else "http://") + rest, ("wss://" if secure else "ws://") + rest


class Client:
    """`Client("127.0.0.1:8000")`: speak (WS /v1/stream), stream_text (WS /v1/stream/text, simple mode),
    session (session mode), voices, health."""

    def __init__(self, server: str = DEFAULT_SERVER, *, timeout: float = 30.0) -> None:
        self.http, self.ws = base_urls(server)
        self.timeout = timeout

    async def speak(self, text: str, **fields: Any) -> Result:
        """The whole text over WS /v1/stream → the complete result."""
        stream = await SimpleStream.open(self.ws, text=text, incremental=False, open_timeout=self.timeout, **fields)
        async with stream:
            return await stream.collect()

    async def stream_text(self, **fields: Any) -> SimpleStream:
        """An incremental simple-mode stream (WS /v1/stream/text): send(), flush(), end(), cancel()."""
        return await SimpleStream.open(self.ws, incremental=True, open_timeout=self.timeout, **fields)

    async def session(self, *, audio: AudioFormat | None = None, framing: str = "binary", **defaults: Any) -> Session:
        """A session-mode connection (raises SessionModeUnavailable on a server without it)."""
        return await Session.connect(self.ws, audio=audio, framing=framing, open_timeout=self.timeout, **defaults)

    async def voices(self) -> list[dict[str, Any]] | None:
        """GET /v1/voices, or None when the server has no such route (an older server)."""
        async with httpx.AsyncClient(timeout=self.timeout) as http:
            r = await http.get(self.http + "/v1/voices")
        if r.status_code == 404:
            return None
        r.raise_for_status()
        body = r.json()
        items = body.get("data", body.get("voices", [])) if isinstance(body, dict) else body
        return list(items or [])

    async def health(self) -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=self.timeout) as http:
            r = await http.get(self.http + "/health")
        return dict(r.json())


def synthesize(text: str, server: str = DEFAULT_SERVER, *, out: str | None = None, **fields: Any) -> Result:
    """One-shot, blocking: the text's audio (int16 PCM at result.format.sample_rate); `out` also writes a WAV.
    Not for use inside a running event loop (use `await Client(server).speak(text)` there)."""
    result = asyncio.run(Client(server).speak(text, **fields))
    if out is not None:
        result.save_wav(out)
    return result
