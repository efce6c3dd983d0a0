"""The voice library's routes: POST /v1/voices (reference audio + ref_text, or "from_design"), GET /v1/voices,
GET and DELETE /v1/voices/{voice_id}; the reading of a request's reference recording (shared with
POST /v1/audio/clone); and inline references (ref_audio_base64 + ref_text on any entry point), encoded once.

A saved voice is the engine's encoded clone prompt (voices/store.py), so using it never re-encodes audio.
Imports api.http (form parsing), voices, engine.base; never an engine's internals, never torch.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import hashlib
import uuid
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from realtime_tts import omnivoice_text
from realtime_tts.api.http import _form
from realtime_tts.engine.base import Engine, SegmentRequest, Voice, VoicePrompt
from realtime_tts.errors import BadRequest, TTSError
from realtime_tts.protocol import SpeechRequest, _Reader
from realtime_tts.voices import reference
from realtime_tts.voices.store import SavedVoice, VoiceStore, check_metadata

if TYPE_CHECKING:
    from realtime_tts.api.app import AppState
    from realtime_tts.service import Service

_FILE_FIELDS = ("ref_audio", "audio", "file")
_BASE64_FIELDS = ("ref_audio_base64", "audio_base64", "ref_audio", "audio")
# What a designed voice says in its reference when the request gives no ref_text (~4 s: long enough to carry
# the voice, short enough to keep every later prompt cheap).
DESIGN_REFERENCE_TEXT = "Hello! This is my voice. I am glad to meet you, and I hope you enjoy listening."
_DESIGN_SEED = 4242  # a from_design voice without a seed is still reproducible


async def reference_bytes(fields: dict[str, Any], files: dict[str, UploadFile]) -> bytes:
    """The reference recording of a form or JSON body: a file part, else base64 (a data: URL too)."""
    for name in _FILE_FIELDS:
        upload = files.get(name)
        if upload is not None:
            data = await upload.read()
            if not data:
                raise BadRequest(f"{name} is an empty file", field=name)
            return data
    for name in _BASE64_FIELDS:
        b64 = fields.get(name)
        if isinstance(b64, str) and b64.strip():
            return await asyncio.to_thread(_b64, b64, name)
    raise BadRequest("ref_audio (a file part) or ref_audio_base64 is required", field="ref_audio")


class ReferenceCache:
    """Inline references (a recording sent with the request) encoded once: the same audio + transcript again
    reuses the prompt (and the workers' decoded copy, keyed by its hash), so a client that sends its reference
    with every request pays the codec encoder once."""

    def __init__(self, size: int = 64):
        self._size = size
        self._prompts: OrderedDict[str, VoicePrompt] = OrderedDict()

    async def prompt(self, service: Service, engine: Engine, data: bytes, ref_text: str | None) -> VoicePrompt:
        text = (ref_text or "").strip()
        key = await asyncio.to_thread(_reference_key, data, text)  # up to 20 MiB: off the event loop
        hit = self._prompts.get(key)
        if hit is not None and hit.engine == engine.capabilities.engine:
            self._prompts.move_to_end(key)
            return hit
        samples, rate = await asyncio.to_thread(reference.decode, data)  # the audio's problems first
        if not text:
            raise BadRequest("ref_text (the transcript of the reference audio) is required", field="ref_text")
        prompt = await service.encode_voice(engine, samples, rate, text)
        prompt = dataclasses.replace(prompt, key=f"inline:{key}")
        self._prompts[key] = prompt
        while len(self._prompts) > self._size:
            self._prompts.popitem(last=False)
        return prompt

    async def for_request(self, state: AppState, req: SpeechRequest) -> VoicePrompt | None:
        """The prompt of a request's inline reference (JSON speech/synth, WS first frames), or None."""
        if req.ref_audio is None:
            return None
        engine = state.pool.route(req.params.model, "clone")  # the CPU voice: 400 naming omnivoice
        data = await asyncio.to_thread(_b64, req.ref_audio, "ref_audio_base64")  # ~100 ms for 20 MiB
        return await self.prompt(state.service, engine, data, req.ref_text)


def _reference_key(data: bytes, text: str) -> str:
    digest = hashlib.sha256(data)
    digest.update(b"\0" + text.encode())
    return digest.hexdigest()[:32]


def _b64(value: str, name: str) -> bytes:
    try:
        return base64.b64decode(value.split(",", 1)[-1], validate=True)  # also takes a data: URL
    except (binascii.Error, ValueError):
        raise BadRequest(f"{name} is not valid base64 audio", field=name) from None


def _optional(fields: dict[str, Any], name: str) -> str | None:
    value = fields.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRequest(f"{name} must be a string", field=name)
    return value.strip() or None


def _seed(fields: dict[str, Any]) -> int | None:
    # the wire's integer rules (protocol._Reader): "9" in a form, 9 or 9.0 in JSON; 1.5 and true are refused
    if fields.get("seed") == "":
        return None
    return _Reader(fields, frozenset(fields), coerce=True).integer("seed", 0, 2**63 - 1)


class VoiceRoutes:
    def __init__(self, state: AppState, store: VoiceStore):
        self.state = state
        self.store = store

    def _engine(self, request: Request) -> Engine:
        # Checked before the body is read: without an engine that can clone there is nothing to save.
        return self.state.pool.route(request.query_params.get("model"), "clone")

    async def create(self, request: Request) -> Response:
        engine = self._engine(request)
        fields, files = await _form(request)
        name = _optional(fields, "name")
        language = _optional(fields, "language")
        description = _optional(fields, "description")
        instruct = _optional(fields, "from_design")
        if instruct is not None:
            voice = await self._design(engine, fields, name, language, description, instruct)
        else:
            name, ref_text = check_metadata(name, _optional(fields, "ref_text"), language, description)
            recording = await reference_bytes(fields, files)
            samples, rate = await asyncio.to_thread(reference.decode, recording)
            prompt = await self.state.service.encode_voice(engine, samples, rate, ref_text)
            voice = await self.store.asave(prompt, name=name, language=language, description=description)
        return JSONResponse(voice.info(), status_code=201)

    async def _design(self, engine: Engine, fields: dict[str, Any], name: str | None, language: str | None,
                      description: str | None, instruct: str) -> SavedVoice:
        """A voice from a design instruct: its generated reference (codes + text) becomes the voice."""
        ref_text = _optional(fields, "ref_text") or DESIGN_REFERENCE_TEXT
        name, ref_text = check_metadata(name or instruct[:64], ref_text, language, description)
        omnivoice_text.normalize_instruct(instruct, ref_text)  # 400 naming the bad items, before any work
        seed = _seed(fields)
        seed = _DESIGN_SEED if seed is None else seed
        if not engine.capabilities.continuity:
            raise BadRequest(f"from_design needs an engine that returns generated codes; the "
                             f"{engine.capabilities.engine!r} engine does not", field="from_design")
        request = SegmentRequest(request_id=f"design-{uuid.uuid4().hex[:12]}", text=ref_text,
                                 voice=Voice(mode="design", instruct=instruct), language=language, seed=seed,
                                 keep_codes=True)
        prompt: VoicePrompt | None = None
        try:
            async for chunk in engine.synthesize(request):
                prompt = chunk.prompt or prompt
        finally:
            await engine.abort(request.request_id)
        if prompt is None:
            raise TTSError("the engine returned no codes for the designed reference")
        return await self.store.asave(prompt, name=name, language=language, description=description,
                                      source="design", instruct=instruct, seed=seed)

    async def index(self, request: Request) -> Response:
        voices = await self.store.asaved()
        return JSONResponse({"object": "list", "data": [v.info() for v in voices]})

    async def get(self, request: Request) -> Response:
        voice = await self.store.aget(request.path_params["voice_id"])
        return JSONResponse(voice.info())

    async def delete(self, request: Request) -> Response:
        voice_id = request.path_params["voice_id"]
        await self.store.adelete(voice_id)
        return JSONResponse({"voice_id": voice_id, "object": "voice", "deleted": True})


def voice_routes(state: AppState, store: VoiceStore) -> list[Route]:
    r = VoiceRoutes(state, store)
    return [
        Route("/v1/voices", r.create, methods=["POST"]),
        Route("/v1/voices", r.index, methods=["GET"]),
        Route("/v1/voices/{voice_id}", r.get, methods=["GET"]),
        Route("/v1/voices/{voice_id}", r.delete, methods=["DELETE"]),
    ]
