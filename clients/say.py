"""Example client: speak text through a running realtime_tts server and save a WAV file.

    python clients/say.py "Hello from the server."                      # WS /v1/stream
    python clients/say.py --tokens "Streamed like an LLM reply. Word by word."   # WS /v1/stream/text
    python clients/say.py --http "Over plain HTTP."                     # POST /v1/audio/speech (chunked)
    python clients/say.py --voice alloy --seed 7 --out hello.wav "Hi!"

Needs only `websockets` and `httpx`; prints the server's stats envelope.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import wave

import httpx
import websockets


async def read_audio(ws: websockets.ClientConnection, t0: float) -> tuple[bytes, dict[str, object], float]:
    """PCM frames until the terminal JSON frame → (pcm, terminal frame, seconds to the first audio frame)."""
    pcm = bytearray()
    first: float | None = None
    while True:
        msg = await ws.recv()
        if isinstance(msg, bytes):
            first = first or time.perf_counter() - t0
            pcm += msg
            continue
        done = json.loads(msg)
        if "error" in done or done.get("type") == "error":
            raise SystemExit(f"server error: {done}")
        if done.get("done"):
            return bytes(pcm), done, first or 0.0


async def ws_stream(url: str, request: dict[str, object]) -> tuple[bytes, dict[str, object], float]:
    async with websockets.connect(f"{url}/v1/stream", max_size=None) as ws:
        t0 = time.perf_counter()
        await ws.send(json.dumps(request))
        return await read_audio(ws, t0)


async def ws_tokens(url: str, request: dict[str, object], text: str) -> tuple[bytes, dict[str, object], float]:
    """Sends the text in 4-character pieces, as an LLM would, while reading audio concurrently."""
    async with websockets.connect(f"{url}/v1/stream/text", max_size=None) as ws:
        t0 = time.perf_counter()
        await ws.send(json.dumps(request))

        async def send_tokens() -> None:
            for i in range(0, len(text), 4):
                await ws.send(json.dumps({"text": text[i:i + 4]}))
                await asyncio.sleep(0.01)  # ~100 tokens/s
            await ws.send(json.dumps({"end": True}))

        sender = asyncio.create_task(send_tokens())
        result = await read_audio(ws, t0)
        await sender
        return result


def http_speech(url: str, request: dict[str, object]) -> tuple[bytes, dict[str, object], float]:
    body = {"input": request.pop("text"), "response_format": "pcm", **request}
    pcm = bytearray()
    first: float | None = None
    t0 = time.perf_counter()
    with httpx.stream("POST", f"{url}/v1/audio/speech", json=body, timeout=120) as r:
        if r.status_code != 200:
            raise SystemExit(f"server error {r.status_code}: {r.read().decode()}")
        rate = int(r.headers["x-audio-sample-rate"])
        for chunk in r.iter_bytes():
            first = first or time.perf_counter() - t0
            pcm += chunk
    return bytes(pcm), {"sample_rate": rate, "stats": json.loads(r.headers["x-stats"])}, first or 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("text")
    ap.add_argument("--server", default="127.0.0.1:8000", help="host:port of the server")
    ap.add_argument("--voice", default="auto")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--speed", type=float)
    ap.add_argument("--out", default="out.wav")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--tokens", action="store_true", help="stream the text in small pieces (/v1/stream/text)")
    mode.add_argument("--http", action="store_true", help="use POST /v1/audio/speech")
    args = ap.parse_args()
    request: dict[str, object] = {"text": args.text, "voice": args.voice}
    if args.seed is not None:
        request["seed"] = args.seed
    if args.speed is not None:
        request["speed"] = args.speed
    if args.http:
        pcm, done, first = http_speech(f"http://{args.server}", request)
    elif args.tokens:
        text = str(request.pop("text"))
        pcm, done, first = asyncio.run(ws_tokens(f"ws://{args.server}", request, text))
    else:
        pcm, done, first = asyncio.run(ws_stream(f"ws://{args.server}", request))
    rate = int(done["sample_rate"])  # type: ignore[call-overload]
    with wave.open(args.out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm)
    print(json.dumps(done.get("stats"), indent=1))
    print(f"{len(pcm) / 2 / rate:.2f} s of audio at {rate} Hz → {args.out} (first audio after {first * 1e3:.0f} ms)",
          file=sys.stderr)


if __name__ == "__main__":
    main()
