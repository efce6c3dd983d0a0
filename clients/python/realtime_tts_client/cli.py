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
from collections.abc import AsyncIterator, Sequence
from typing import Any

from realtime_tts_client.client import DEFAULT_SERVER, Client
from realtime_tts_client.speak import Spoken, speak_chunks


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


async def one(text: str) -> AsyncIterator[str]:
    yield text


async def say(args: argparse.Namespace) -> int:
    fields: dict[str, Any] = {"voice": args.voice, "seed": args.seed, "speed": args.speed}
    chunks = stdin_chunks() if args.text == "-" else one(args.text)
    spoken = await speak_chunks(Client(args.server), chunks, mode=args.mode, out=args.out, **fields)
    report(spoken, "say", stats=args.stats)
    if spoken.cancelled_after_ms is not None:
        return 130  # interrupted, as a shell reports Ctrl-C
    return 0 if spoken.done is not None and spoken.done.reason == "end" and not spoken.errors else 1


def report(spoken: Spoken, prog: str, *, stats: bool) -> None:
    """One line on stderr (what was heard or written, first audio); the stats envelope on stdout if asked."""
    for e in spoken.errors:
        print(f"{prog}: server error {e.code}: {e.message}", file=sys.stderr)
    if spoken.cancelled_after_ms is not None:
        done = spoken.done
        heard = f": heard {done.text_spoken!r}" if done is not None and done.text_spoken is not None else ""
        print(f"{prog}: cancelled after {spoken.cancelled_after_ms:.0f} ms played{heard}", file=sys.stderr)
    where = f"→ {spoken.out}" if spoken.out else "played"
    first = f"{spoken.first_audio_s * 1e3:.0f} ms" if spoken.first_audio_s is not None else "never"
    print(f"{spoken.seconds:.2f} s of audio at {spoken.sample_rate} Hz {where} ({spoken.mode} mode, first audio "
          f"after {first})", file=sys.stderr)
    if stats and spoken.done is not None:
        print(json.dumps(spoken.done.stats, indent=1))


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
