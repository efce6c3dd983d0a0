"""The session client counts audio for no live context (Session.stray_audio_bytes), the figure bench/load.py checks
the "no audio after context.done" contract with. Our server never sends such audio, so a scripted WebSocket server
on loopback plays a server that does (the edge case no real part produces): audio for a live context is
delivered, audio on its slot after its context.done and on a slot nobody started is counted, not delivered."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import websockets
from realtime_tts_client.events import Audio
from realtime_tts_client.session import Session

from realtime_tts.protocol_session import pack_header


def frame(slot: int, payload: bytes) -> bytes:
    """A session-mode audio frame as the server packs it."""
    return pack_header(0, slot, 0, 0, 0) + payload


async def scripted(ws: Any) -> None:
    start = json.loads(await ws.recv())
    assert start["type"] == "session.start"
    await ws.send(json.dumps({"type": "session.started", "session_id": "s", "audio": {"encoding": "pcm_s16le",
                                                                                     "sample_rate": 24000}}))
    first = json.loads(await ws.recv())  # the context's first text opens it
    cid = first["context_id"]
    await ws.send(json.dumps({"type": "context.started", "context_id": cid, "slot": 3}))
    await ws.send(frame(3, b"\x01\x00" * 10))  # 20 bytes for the live context
    await ws.send(json.dumps({"type": "context.done", "context_id": cid, "reason": "cancelled", "stats": {}}))
    await ws.send(frame(3, b"\x02\x00" * 4))  # 8 bytes after its done
    await ws.send(frame(9, b"\x03\x00" * 2))  # 4 bytes on a slot nobody started
    await ws.wait_closed()


def test_audio_after_context_done_is_counted_not_delivered() -> None:
    async def run() -> tuple[list[Any], int]:
        async with websockets.serve(scripted, "127.0.0.1", 0) as server:
            port = server.sockets[0].getsockname()[1]
            session = await Session.connect(f"ws://127.0.0.1:{port}", endpoint="/")
            ctx = session.context("c1")
            await ctx.text("Hello.")
            events = [ev async for ev in ctx.events()]
            for _ in range(100):  # the two stray frames follow the done
                if session.stray_audio_bytes >= 12:
                    break
                await asyncio.sleep(0.01)
            stray = session.stray_audio_bytes
            await session.ws.close()
            return events, stray

    events, stray = asyncio.run(run())
    audio = [ev for ev in events if isinstance(ev, Audio)]
    assert [len(a.data) for a in audio] == [20]  # only the live context's audio reached it
    assert stray == 12
