"""A tiny OpenAI-compatible chat completion server for the LLM bridge's test: POST /v1/chat/completions with
"stream": true answers server-sent events with the reply cut into BPE-sized pieces (~4 characters), paced like
a hosted model (a time to first token, then tokens at a jittered rate). Run by the test on 127.0.0.1 only:

    python tests/clients/fake_llm.py --port P [--first-token-ms 300] [--tokens-per-s 40]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import time
from collections.abc import AsyncIterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

REPLY = ("Sure, I can help with that. The museum opens at nine and closes at six on weekdays. "
         "Tickets are cheaper if you book them online, and children under twelve get in for free.")
API_KEY = "test-key"


def tokens(text: str) -> list[str]:
    """BPE-like pieces: a leading space stays with its word, long words split every 4 characters."""
    return re.findall(r" ?[^\s]{1,4}", text)


def make_app(first_token_s: float, tokens_per_s: float, seed: int) -> Starlette:
    async def completions(request: Request) -> Response:
        if request.headers.get("authorization") != f"Bearer {API_KEY}":
            return JSONResponse({"error": {"message": "invalid api key", "type": "invalid_request_error"}}, 401)
        body = await request.json()
        if body.get("stream") is not True or not body.get("messages") or not body.get("model"):
            return JSONResponse({"error": {"message": "model, messages and stream: true are required"}}, 400)
        rng = random.Random(seed)
        created = int(time.time())

        def chunk(delta: dict[str, str], finish: str | None = None) -> str:
            return "data: " + json.dumps({"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                                          "created": created, "model": body["model"],
                                          "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}) + "\n\n"

        async def events() -> AsyncIterator[str]:
            yield chunk({"role": "assistant", "content": ""})
            await asyncio.sleep(first_token_s)
            for piece in tokens(REPLY):
                yield chunk({"content": piece})
                await asyncio.sleep(rng.expovariate(tokens_per_s))  # mean 1/tokens_per_s, bursty like a server
            yield chunk({}, "stop")
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--first-token-ms", type=float, default=300.0)
    p.add_argument("--tokens-per-s", type=float, default=40.0)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    app = make_app(a.first_token_ms / 1000.0, a.tokens_per_s, a.seed)
    uvicorn.run(app, host="127.0.0.1", port=a.port, log_level="warning")


if __name__ == "__main__":
    main()
