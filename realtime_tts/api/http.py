"""HTTP speech responses: buffered body, chunked audio stream or SSE, and request-body/form parsing."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TYPE_CHECKING, Any

from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Message

from realtime_tts import audio, protocol
from realtime_tts.errors import BadRequest, PayloadTooLarge
from realtime_tts.protocol import SpeechRequest
from realtime_tts.service import AudioFrame, Synthesis

if TYPE_CHECKING:
    from realtime_tts.api.app import AppState

MAX_UPLOAD_BYTES = 20 << 20  # a whole form or JSON body carrying a reference recording (files included)


def _headers(synth: Synthesis, req: SpeechRequest, *, partial: bool) -> dict[str, str]:
    stats = synth.stats()
    if partial:
        stats["partial"] = True  # streamed: headers leave before the end, so totals are not known yet
    headers = {
        "X-Audio-Sample-Rate": str(synth.sample_rate),
        "X-Stats": json.dumps(stats, separators=(",", ":")),
        "X-Request-Id": synth.id,
    }
    warnings = [*req.warnings, *synth.warnings]
    if warnings:
        headers["X-Warnings"] = json.dumps(warnings)
    return headers


async def _collect(synth: Synthesis) -> bytes:
    pcm = bytearray()
    async for ev in synth.events():
        if isinstance(ev, AudioFrame):
            pcm += ev.pcm
    return bytes(pcm)


async def respond(app: AppState, req: SpeechRequest, *, endpoint: str, synth: Synthesis) -> Response:
    """Answer one HTTP speech request: buffered body, chunked audio stream, or SSE."""
    synth.speak(req.text)
    fmt = req.response_format
    sse = req.stream_format == "sse"
    streamed = sse or (req.stream is None and fmt in audio.STREAMABLE_FORMATS)
    if not streamed:
        async with synth:
            pcm = await _collect(synth)
        try:
            # encoders (mp3/opus/...) take real CPU time on long audio: never on the event loop
            body = await asyncio.to_thread(audio.encode, pcm, synth.sample_rate, fmt)
        except ValueError as e:
            raise BadRequest(str(e), field="response_format") from None
        return Response(body, media_type=audio.MEDIA_TYPES[fmt], headers=_headers(synth, req, partial=False))

    async def byte_stream() -> AsyncGenerator[bytes, None]:
        async with synth:
            if fmt in audio.STREAMABLE_FORMATS:
                header = audio.wav_header(synth.sample_rate) if fmt == "wav" else b""
                async for ev in synth.events():
                    if isinstance(ev, AudioFrame):
                        yield header + ev.pcm
                        header = b""
                if header:  # no audio at all: still a valid (empty) stream
                    yield header
            else:  # encoded formats are made once the whole audio exists
                yield await asyncio.to_thread(audio.encode, await _collect(synth), synth.sample_rate, fmt)

    chunks = byte_stream()
    # Pull the first audio before answering, so refusals and engine errors still get a proper 4xx/5xx.
    try:
        first = await chunks.__anext__()
    except StopAsyncIteration:
        first = b""
    headers = _headers(synth, req, partial=True)

    async def rest() -> AsyncGenerator[bytes, None]:
        # aclosing: a client that goes away closes this generator, which must close (and abort) the synthesis
        # now, not whenever the garbage collector finalises it.
        async with contextlib.aclosing(chunks):
            if first:
                yield first
            async for chunk in chunks:
                yield chunk

    if not sse:
        return StreamingResponse(rest(), media_type=audio.MEDIA_TYPES[fmt], headers=headers)

    async def events() -> AsyncIterator[str]:
        async with contextlib.aclosing(rest()) as audio_chunks:
            async for chunk in audio_chunks:
                yield _sse({"type": "speech.audio.delta", "audio": base64.b64encode(chunk).decode()})
        usage = {"input_tokens": synth.num_chars, "output_tokens": synth.samples_out,
                 "total_tokens": synth.num_chars + synth.samples_out}
        yield _sse({"type": "speech.audio.done", "usage": usage, "sample_rate": synth.sample_rate,
                    "stats": synth.stats()})

    return StreamingResponse(events(), media_type="text/event-stream", headers={**headers, "Cache-Control": "no-cache"})


def _sse(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


async def _json_body(request: Request, limit: int) -> dict[str, Any]:
    raw = await request.body()
    if len(raw) > limit:
        raise PayloadTooLarge(f"request body of {len(raw)} bytes exceeds {limit}")
    return protocol.body_object(raw)


def _limited(request: Request, limit: int) -> Request:
    """The same request whose body stream raises PayloadTooLarge once more than `limit` bytes arrived: a
    declared Content-Length over the limit is refused before anything is read, and a chunked or lying body
    while it streams, so no part (file parts included: Starlette's max_part_size only bounds the others) is
    ever buffered past the limit."""
    too_large = PayloadTooLarge(f"request body exceeds the upload limit of {limit} bytes ({limit >> 20} MiB)",
                                field="(body)")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    received = 0

    async def receive() -> Message:
        nonlocal received
        message = await request.receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                raise too_large
        return message

    return Request(request.scope, receive)


async def _form(request: Request, limit: int = MAX_UPLOAD_BYTES) -> tuple[dict[str, Any], dict[str, UploadFile]]:
    """Multipart/urlencoded form → (string fields, uploaded files); JSON bodies are accepted too. The whole
    body is bounded by `limit` while it streams (413 naming it)."""
    request = _limited(request, limit)
    ctype = request.headers.get("content-type", "")
    if ctype.startswith("application/json"):
        return await _json_body(request, limit), {}
    try:
        form = await request.form(max_part_size=limit)
    except (MultiPartException, HTTPException) as e:  # malformed body (Starlette wraps it as a 400 HTTPException)
        raise BadRequest(f"malformed form body: {getattr(e, 'detail', None) or e}", field="(body)") from None
    fields: dict[str, Any] = {}
    files: dict[str, UploadFile] = {}
    for key, value in form.multi_items():
        if isinstance(value, UploadFile):
            files[key] = value
        else:
            fields[key] = value
    return fields, files
