"""`say`: speak text through a running server, playing it (when this machine can) or writing a WAV file.

    realtime-tts say "Hello there." [--voice alloy] [--out hello.wav]
    llm | realtime-tts say -        # stdin as it arrives: each read is sent as it comes (WS /v1/stream/text)

The server's CLI registers this as its `say` subcommand (realtime_tts/cli: one line); `realtime-tts-say` is
the same program for a client-only install. Session mode is used when the server has it (--mode auto), else
simple mode. Ctrl-C while speaking cancels with played_ms and prints what the listener heard (text_spoken).
Imports only the client package.
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import json
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

from realtime_tts_client.audio import AudioFormat, to_s16, write_wav
from realtime_tts_client.client import DEFAULT_SERVER, Client
from realtime_tts_client.events import Audio, Done, Event, ServerError
from realtime_tts_client.player import Player
from realtime_tts_client.session import SessionModeUnavailable


class Speaker(Protocol):
    """What both a simple-mode stream and a session context offer (the calls `say` needs)."""

    async def text(self, text: str) -> None: ...
    async def end(self) -> None: ...
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


async def cancel(speaker: Any, played_ms: float | None) -> Done | None:
    """Cancel with what was heard, then read to the end: the last event may say what that was (text_spoken)."""
    done = await speaker.cancel(played_ms)  # a session Context drains to its context.done and returns it
    if done is None:
        async for ev in speaker.events():
            if isinstance(ev, Done):
                done = ev
    return done if isinstance(done, Done) else None


async def stdin_chunks() -> AsyncIterator[str]:
    """Text from stdin as it arrives (each read(2), decoded incrementally: a UTF-8 character split across
    reads waits for its other bytes). A thread reads, so the event loop keeps playing meanwhile."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()

    def reader() -> None:
        fd = sys.stdin.fileno()
        while True:
            data = os.read(fd, 4096)
            loop.call_soon_threadsafe(queue.put_nowait, data or None)
            if not data:
                return

    threading.Thread(target=reader, name="say-stdin", daemon=True).start()
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while (data := await queue.get()) is not None:
        if text := decoder.decode(data):
            yield text
    if tail := decoder.decode(b"", final=True):
        yield tail


async def say(args: argparse.Namespace) -> int:
    client = Client(args.server)
    fields: dict[str, Any] = {"voice": args.voice, "seed": args.seed, "speed": args.speed}
    speaker, fmt, conn = await open_speaker(client, args.mode, fields)
    player = None if args.out else Player.open(fmt.sample_rate)
    out = args.out or ("say.wav" if player is None else None)
    pcm = bytearray()
    done: Done | None = None
    t0 = time.perf_counter()
    first: float | None = None

    async def feed() -> None:
        if args.text == "-":
            async for chunk in stdin_chunks():
                await speaker.text(chunk)
        else:
            await speaker.text(args.text)
        await speaker.end()

    feeder = asyncio.create_task(feed())
    try:
        async for ev in speaker.events():
            if isinstance(ev, Audio) and ev.data:
                first = first if first is not None else time.perf_counter() - t0
                data = to_s16(ev.data, fmt.encoding)
                pcm += data
                if player is not None:
                    await asyncio.to_thread(player.write, data)
            elif isinstance(ev, ServerError):
                print(f"say: server error {ev.code}: {ev.message}", file=sys.stderr)
            elif isinstance(ev, Done):
                done = ev
        await feeder
    except (KeyboardInterrupt, asyncio.CancelledError):
        # barge-in from the keyboard: tell the server what was heard, report what it says that was
        played = player.played_ms() if player is not None else None
        feeder.cancel()
        if player is not None:
            player.close(drain=False)
        done = await asyncio.wait_for(cancel(speaker, played), 10)
        heard = f": heard {done.text_spoken!r}" if done is not None and done.text_spoken is not None else ""
        print(f"say: cancelled after {played or 0:.0f} ms played{heard}", file=sys.stderr)
        return 130
    finally:
        await conn.close()
    if player is not None:
        await asyncio.to_thread(player.close)
    if out:
        write_wav(out, bytes(pcm), fmt.sample_rate)
    seconds = len(pcm) / 2 / fmt.sample_rate
    where = f"→ {out}" if out else "played"
    print(f"{seconds:.2f} s of audio at {fmt.sample_rate} Hz {where} (first audio after "
          f"{(first or 0) * 1e3:.0f} ms)", file=sys.stderr)
    if args.stats and done is not None:
        print(json.dumps(done.stats, indent=1))
    return 0 if done is not None and done.reason in ("end", "flush") else 1


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = parser or argparse.ArgumentParser(prog="realtime-tts say", description=__doc__,
                                          formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("text", help='the text to speak, or "-" to read stdin as it arrives')
    p.add_argument("--server", default=os.environ.get("REALTIME_TTS_SERVER", DEFAULT_SERVER),
                   help="host:port or URL of the server [env REALTIME_TTS_SERVER; default %(default)s]")
    p.add_argument("--voice", default="auto")
    p.add_argument("--seed", type=int)
    p.add_argument("--speed", type=float)
    p.add_argument("--out", help="write a WAV file instead of playing (default: play; say.wav if no player)")
    p.add_argument("--mode", choices=("auto", "session", "simple"), default="auto",
                   help="session mode (PROTOCOL.md §2), simple mode (§1), or session when the server has it")
    p.add_argument("--stats", action="store_true", help="print the server's stats envelope (JSON) on stdout")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """`realtime-tts-say ...` (a client-only install)."""
    return run(build_parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Run `say` with parsed arguments (the server CLI's `realtime-tts say` parses with build_parser too)."""
    try:
        return asyncio.run(say(args))
    except KeyboardInterrupt:
        return 130
    except (OSError, RuntimeError) as e:  # connection refused, server error: one clear line, no traceback
        print(f"say: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
