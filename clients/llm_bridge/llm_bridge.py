"""LLM bridge: stream a chat completion from any OpenAI-compatible endpoint and speak it as it is written.

    python clients/llm_bridge "Tell me about the weather." --llm http://127.0.0.1:11434/v1 --model llama3
    python clients/llm_bridge "..." --llm "$OPENAI_BASE_URL" --model gpt-4o-mini --out reply.wav

Reads POST {llm}/chat/completions with "stream": true (server-sent events, `data: {...choices[0].delta.content}`
up to `data: [DONE]`), pipes each token into the TTS server's WS /v1/stream/text the moment it arrives (session
mode when the server has it, else simple mode) and plays the audio in real time (or writes --out). The reply's
text is echoed to stdout as it streams. Ctrl-C is a barge-in: the TTS cancel carries played_ms.
Imports httpx and the client package (clients/python), never the server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
from realtime_tts_client import Client
from realtime_tts_client.cli import report
from realtime_tts_client.speak import speak_chunks


class LLMError(RuntimeError):
    """The LLM endpoint answered with an error (status and body in the message)."""


async def chat_tokens(llm: str, model: str, messages: list[dict[str, str]], *, api_key: str | None = None,
                      timeout: float = 120.0, **params: Any) -> AsyncIterator[str]:
    """The content deltas of a streaming chat completion, as they arrive."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    body = {"model": model, "messages": messages, "stream": True, **params}
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=10.0)) as http, \
            http.stream("POST", llm.rstrip("/") + "/chat/completions", json=body, headers=headers) as r:
        if r.status_code != 200:
            raise LLMError(f"LLM endpoint answered {r.status_code}: {(await r.aread()).decode(errors='replace')[:300]}")
        async for line in r.aiter_lines():
            if not line.startswith("data:"):
                continue  # blank separators, ": keep-alive" comments, "event:" lines
            data = line[5:].strip()
            if data == "[DONE]":
                return
            chunk = json.loads(data)
            if "error" in chunk:
                raise LLMError(f"LLM stream error: {json.dumps(chunk['error'])[:300]}")
            for choice in chunk.get("choices") or []:
                content = (choice.get("delta") or {}).get("content")
                if content:
                    yield content


async def echo(tokens: AsyncIterator[str]) -> AsyncIterator[str]:
    async for t in tokens:
        sys.stdout.write(t)
        sys.stdout.flush()
        yield t
    sys.stdout.write("\n")


async def bridge(args: argparse.Namespace) -> int:
    messages = ([{"role": "system", "content": args.system}] if args.system else []) + \
               [{"role": "user", "content": args.prompt}]
    tokens = chat_tokens(args.llm, args.model, messages, api_key=args.api_key)
    fields: dict[str, Any] = {"voice": args.voice, "seed": args.seed}
    spoken = await speak_chunks(Client(args.server), echo(tokens), mode=args.mode, out=args.out,
                                default_out="reply.wav", **fields)
    report(spoken, "llm_bridge", stats=False)
    if args.stats and spoken.done is not None:
        print(json.dumps(spoken.done.stats), file=sys.stderr)
    if spoken.cancelled_after_ms is not None:
        return 130
    return 0 if spoken.done is not None and spoken.done.reason == "end" and not spoken.errors else 1


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="llm_bridge", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("prompt", help="the user message")
    p.add_argument("--llm", default=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1"),
                   help="OpenAI-compatible base URL (…/v1) [env OPENAI_BASE_URL; default %(default)s]")
    p.add_argument("--model", default=os.environ.get("LLM_MODEL", "gpt-4o-mini"), help="[env LLM_MODEL]")
    p.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"), help="[env OPENAI_API_KEY]")
    p.add_argument("--system", help="a system message")
    p.add_argument("--server", default=os.environ.get("REALTIME_TTS_SERVER", "127.0.0.1:8000"),
                   help="the TTS server [env REALTIME_TTS_SERVER; default %(default)s]")
    p.add_argument("--voice", default="auto")
    p.add_argument("--seed", type=int)
    p.add_argument("--out", help="write a WAV file instead of playing")
    p.add_argument("--mode", choices=("auto", "session", "simple"), default="auto")
    p.add_argument("--stats", action="store_true", help="print the TTS stats envelope (JSON) on stderr")
    args = p.parse_args(argv)
    try:
        return asyncio.run(bridge(args))
    except KeyboardInterrupt:
        return 130
    except (LLMError, httpx.HTTPError, OSError, RuntimeError) as e:
        print(f"llm_bridge: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
