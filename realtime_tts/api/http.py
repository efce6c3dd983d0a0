"""HTTP speech responses: chunked audio stream, SSE or buffered body, each encoded frame by frame through
audio_out; and request-body/form parsing."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import functools
import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TYPE_CHECKING, Any

from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Message

from realtime_tts import protocol
from realtime_tts.api.streams import sse_error, watched_stream
from realtime_tts.audio_out import AudioOutput, OutputFormat
from realtime_tts.errors import BadRequest, PayloadTooLarge, TTSError, UnsupportedVoiceMode
from realtime_tts.protocol import SpeechRequest
from realtime_tts.service import AudioFrame, Synthesis

if TYPE_CHECKING:
    from realtime_tts.api.app import AppState
    from realtime_tts.engine.pool import EnginePool

MAX_UPLOAD_BYTES = 20 << 20  # a whole form or JSON body carrying a reference recording (files included)


def _headers(synth: Synthesis, req: SpeechRequest, out: AudioOutput, *, partial: bool) -> dict[str, str]:
    stats = synth.stats()
    if partial:
        stats["partial"] = True  # streamed: headers leave before the end, so totals are not known yet
    headers = {
        "X-Audio-Sample-Rate": str(out.sample_rate),
        "X-Stats": json.dumps(stats, separators=(",", ":")),
        "X-Request-Id": synth.id,
    }
    warnings = [*req.warnings, *synth.warnings]
    if warnings:
        headers["X-Warnings"] = json.dumps(warnings)
    return headers


def output_for(req: SpeechRequest, synth: Synthesis, *, whole: bool = False) -> AudioOutput:
    """The wire encoder for an HTTP request's response_format and sample_rate (400 for what cannot be made)."""
    fmt = OutputFormat.from_response_format(req.response_format, req.params.sample_rate or synth.sample_rate)
    return AudioOutput(fmt, source_rate=synth.sample_rate, whole=whole)


async def _encode(out: AudioOutput, pcm: bytes | None) -> bytes:
    """One frame (None: the tail) through the encoder; codec work leaves the event loop."""
    step = out.finish if pcm is None else functools.partial(out.push, pcm)
    return await asyncio.to_thread(step) if out.encodes else step()


async def respond(app: AppState, req: SpeechRequest, *, endpoint: str, synth: Synthesis) -> Response:
    """Answer one HTTP speech request: every format is encoded frame by frame as audio arrives, and sent
    that way (chunked audio or SSE deltas) unless the request asked for one buffered body ("stream": false)."""
    sse = req.stream_format == "sse"
    streamed = sse or req.stream is not False
    out = output_for(req, synth, whole=not streamed)
    synth.speak(req.text)
    if not streamed:
        synth.buffered()
        try:
            async with synth:
                async for ev in synth.events():
                    if isinstance(ev, AudioFrame):
                        await _encode(out, ev.pcm)
            body = await _encode(out, None)
        finally:
            out.close()
        return Response(body, media_type=out.content_type, headers=_headers(synth, req, out, partial=False))

    async def byte_stream() -> AsyncGenerator[bytes, None]:
        try:
            async with synth:
                async for ev in synth.events():
                    if isinstance(ev, AudioFrame):
                        chunk = await _encode(out, ev.pcm)
                        if chunk:
                            yield chunk
            if not synth.cancelled:
                yield await _encode(out, None)
        finally:
            out.close()  # cancelled, failed or the client left: free the encoder without its tail

    chunks = byte_stream()
    # Pull the first audio before answering, so refusals and engine errors still get a proper 4xx/5xx.
    try:
        first = await chunks.__anext__()
    except StopAsyncIteration:
        first = b""
    headers = _headers(synth, req, out, partial=True)

    async def rest() -> AsyncGenerator[bytes, None]:
        # aclosing: a client that goes away closes this generator, which must close (and abort) the synthesis
        # now, not whenever the garbage collector finalises it.
        async with contextlib.aclosing(chunks), watched_stream(app.metrics, endpoint, sse=sse):
            if first:
                yield first
            async for chunk in chunks:
                if chunk:
                    yield chunk

    if not sse:
        return StreamingResponse(rest(), media_type=out.content_type, headers=headers)

    async def events() -> AsyncIterator[str]:
        try:
            async with contextlib.aclosing(rest()) as audio_chunks:
                async for chunk in audio_chunks:
                    yield _sse({"type": "speech.audio.delta", "audio": base64.b64encode(chunk).decode()})
        except TTSError as e:  # after the headers: the error is the stream's last event
            yield _sse(sse_error(e))
            return
        usage = {"input_tokens": synth.num_chars, "output_tokens": synth.samples_out,
                 "total_tokens": synth.num_chars + synth.samples_out}
        yield _sse({"type": "speech.audio.done", "usage": usage, "sample_rate": out.sample_rate,
                    "stats": synth.stats()})

    return StreamingResponse(events(), media_type="text/event-stream", headers={**headers, "Cache-Control": "no-cache"})


def style_instructions(pool: EnginePool, req: SpeechRequest) -> SpeechRequest:
    """OpenAI's "instructions" ask for a speaking style; on OmniVoice they design the voice. On a server with
    no engine that designs voices (the CPU voice alone), the request is spoken in its voice with a warning
    instead of being refused. An explicit voice "design" is still refused there."""
    params = req.params
    if params.voice_mode != "design" or params.voice.lower() == "design":
        return req
    try:
        pool.route(params.model, "design")
    except UnsupportedVoiceMode as e:
        warning = f"instructions ignored: {e.message}"
        return dataclasses.replace(req, params=dataclasses.replace(params, voice_mode="auto", instruct=None),
                                   warnings=(*req.warnings, warning))
    return req


def _sse(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


async def _json_body(request: Request, limit: int) -> dict[str, Any]:
    raw = await request.body()
    if len(raw) > limit:
        raise PayloadTooLarge(f"request body of {len(raw)} bytes exceeds {limit}", limit="max_body_bytes")
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
