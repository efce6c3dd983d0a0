"""Speak a stream of text chunks and hear it: the loop `say` and the LLM bridge share.

Owns open_speaker (session mode when the server has it, else simple mode), speak_chunks (send chunks as they
come while audio plays or is collected; Ctrl-C / task cancel = barge-in: cancel with played_ms, report
text_spoken) and Spoken, its outcome. Imports only the client package.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

from realtime_tts_client.audio import AudioFormat, to_s16, write_wav
from realtime_tts_client.client import Client
from realtime_tts_client.events import Audio, Done, Event, ServerError
from realtime_tts_client.player import Player
from realtime_tts_client.session import SessionModeUnavailable


class Speaker(Protocol):
    """What both a simple-mode stream and a session context offer."""

    async def text(self, text: str) -> None: ...
    async def end(self) -> None: ...
    async def cancel(self, played_ms: float | None = None, *, wait: bool = ...) -> Any: ...
    def events(self) -> AsyncIterator[Event]: ...


async def open_speaker(client: Client, mode: str, fields: dict[str, Any]) -> tuple[Speaker, AudioFormat, Any]:
    """(speaker, audio format, connection to close): session mode when asked or available, else simple."""
    if mode in ("auto", "session"):
        try:
            session = await client.session(**fields)
            return session.context(), session.audio, session
        except SessionModeUnavailable:
            if mode == "session":
                raise
    stream = await client.stream_text(**fields)
    return stream, stream.format, stream


async def cancel(speaker: Speaker, played_ms: float | None) -> Done | None:
    """Cancel with what was heard, then read to the end: the last event may say what that was (text_spoken)."""
    done = await speaker.cancel(played_ms)  # a session Context drains to its context.done and returns it
    if done is None:
        async for ev in speaker.events():
            if isinstance(ev, Done):
                done = ev
    return done if isinstance(done, Done) else None


@dataclass
class Spoken:
    pcm: bytes  # int16 LE
    sample_rate: int
    done: Done | None
    first_audio_s: float | None  # from the first chunk sent
    mode: str  # "session" | "simple"
    played: bool
    out: str | None
    cancelled_after_ms: float | None = None  # set on a barge-in
    errors: tuple[ServerError, ...] = ()

    @property
    def seconds(self) -> float:
        return len(self.pcm) / 2 / self.sample_rate


async def speak_chunks(client: Client, chunks: AsyncIterable[str], *, mode: str = "auto", out: str | None = None,
                       play: bool = True, default_out: str = "say.wav", **fields: Any) -> Spoken:
    """Send each chunk as it comes, end, and play the audio in real time (or write `out`; with no player on this
    machine, `default_out`). Cancelling the calling task is a barge-in: cancel with played_ms, then return."""
    speaker, fmt, conn = await open_speaker(client, mode, fields)
    player = Player.open(fmt.sample_rate) if play and not out else None
    out = out or (default_out if player is None else None)
    pcm = bytearray()
    errors: list[ServerError] = []
    done: Done | None = None
    first: float | None = None
    t0: float | None = None

    async def feed() -> None:
        nonlocal t0
        try:
            async for chunk in chunks:
                t0 = t0 or time.perf_counter()
                await speaker.text(chunk)
        except Exception:
            # the text source failed (an LLM error): stop the turn so the server does not wait for more text;
            # the events loop then ends with the cancel's Done and `await feeder` raises this error
            await speaker.cancel(None, wait=False)
            raise
        await speaker.end()

    feeder = asyncio.create_task(feed())
    cancelled_after: float | None = None
    try:
        async for ev in speaker.events():
            if isinstance(ev, Audio) and ev.data:
                first = first if first is not None else time.perf_counter() - (t0 or time.perf_counter())
                data = to_s16(ev.data, fmt.encoding)
                pcm += data
                if player is not None:
                    await asyncio.to_thread(player.write, data)
            elif isinstance(ev, ServerError):
                errors.append(ev)
            elif isinstance(ev, Done):
                done = ev
        await feeder
        if player is not None:
            await asyncio.to_thread(player.close)
    except (KeyboardInterrupt, asyncio.CancelledError):
        # barge-in: tell the server what the listener heard; its answer may say which text that was
        cancelled_after = player.played_ms() if player is not None else 1000.0 * len(pcm) / 2 / fmt.sample_rate
        feeder.cancel()
        if player is not None:
            player.close(drain=False)
        done = await asyncio.wait_for(cancel(speaker, cancelled_after), 10)
    finally:
        feeder.cancel()
        await conn.close()
    if out:
        write_wav(out, bytes(pcm), fmt.sample_rate)
    kind = "simple" if conn is speaker else "session"
    return Spoken(bytes(pcm), fmt.sample_rate, done, first, kind, player is not None, out, cancelled_after,
                  tuple(errors))
