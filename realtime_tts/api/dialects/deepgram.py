"""Deepgram's TTS WebSocket dialect (WS /v1/speak), as pipecat's DeepgramTTSService and LiveKit's deepgram.TTS
speak it (docs/DIALECTS.md): query model, encoding linear16|mulaw|alaw, sample_rate, speed; client messages
Speak / Flush / Clear / Close; binary audio; Metadata on connect, Flushed when a flush's audio is all out,
Cleared after a Clear, Warning. One utterance stream per socket (one session context at a time: audio of two
utterances never interleaves); Clear cancels it, so text it cleared never gets a Flushed. A thin translation
onto service/session.py; imports api.dialects.connection, audio_out, errors and the session's events only.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from realtime_tts.api.dialects.connection import DialectSocket
from realtime_tts.audio_out import OutputFormat
from realtime_tts.errors import BadRequest, TTSError
from realtime_tts.service.events import AudioFrame
from realtime_tts.service.session import ContextDone, ContextError, FlushDone, SessionEvent

ENCODINGS = {"linear16": "pcm_s16le", "mulaw": "pcm_mulaw", "alaw": "pcm_alaw"}
DEFAULT_RATES = {"linear16": 24000, "mulaw": 8000, "alaw": 8000}  # Deepgram's defaults per encoding
_AURA_RE = re.compile(r"aura(?:-\d+)?-([a-z]+)(?:-([a-z]{2}))?", re.IGNORECASE)


def voice_of(model: str | None) -> tuple[str | None, str | None]:
    """model → (voice name, language): aura-2-thalia-en → (thalia, en); anything else is a voice name itself
    (alloy, a saved voice_... id)."""
    if not model:
        return None, None
    m = _AURA_RE.fullmatch(model)
    return (m.group(1).lower(), m.group(2)) if m else (model, None)


def output_format(query: dict[str, str]) -> OutputFormat:
    encoding = query.get("encoding", "linear16").lower()
    if encoding not in ENCODINGS:
        raise BadRequest(f"encoding {encoding!r} is not one of {', '.join(ENCODINGS)} on the WebSocket",
                         field="encoding")
    raw = query.get("sample_rate")
    try:
        rate = int(raw) if raw else DEFAULT_RATES[encoding]
    except ValueError:
        raise BadRequest(f"sample_rate {raw!r} is not an integer", field="sample_rate") from None
    fmt = OutputFormat(container="raw", encoding=ENCODINGS[encoding], sample_rate=rate)
    fmt.check("sample_rate")
    return fmt


class DeepgramSocket(DialectSocket):
    endpoint = "deepgram"

    def __init__(self, *args: Any, query: dict[str, str], **kw: Any):
        super().__init__(*args, **kw)
        self.query = query
        self.current: str | None = None  # the live context (None until the next Speak)
        self.count = 0
        self.sequence = 0  # Flushed / Cleared carry a sequence id, as Deepgram's do

    async def on_open(self) -> None:
        self.format = output_format(self.query)
        voice, language = voice_of(self.query.get("model"))
        speed = self.query.get("speed")
        try:
            speed_value = float(speed) if speed else None
        except ValueError:
            raise BadRequest(f"speed {speed!r} is not a number", field="speed") from None
        self.context_params, warnings = self.params(voice=voice, voice_field="model", language=language,
                                                    speed=speed_value)
        request_id = str(uuid.uuid4())
        await self.send_json({"type": "Metadata", "request_id": request_id,
                              "model_name": self.query.get("model") or "default", "model_version": "realtime_tts",
                              "model_uuid": request_id})
        for w in warnings:
            await self.send_json({"type": "Warning", "warn_code": "UNKNOWN_VOICE", "warn_msg": w})

    def error_message(self, e: TTSError, context_id: str | None) -> dict[str, Any]:
        return {"type": "Error", "err_code": e.code, "err_msg": e.message, "description": e.message,
                **({"field": e.field} if e.field else {})}

    def context_id_of(self, obj: dict[str, Any]) -> Any:
        return self.current or "-"  # no ids on the wire: one utterance stream per socket

    def apply(self, context_id: str, obj: dict[str, Any]) -> None:
        kind = obj.get("type")
        if kind == "Speak":
            text = obj.get("text")
            if not isinstance(text, str):
                raise BadRequest("Speak needs text (a string)", field="text")
            if text:
                self.session.text(self._context(), text)
        elif kind == "Flush":
            if self.current is None:  # nothing pending: answered at once
                self.reply(self._flushed())
            else:
                self.session.flush(self.current)
        elif kind == "Clear":
            if self.current is None:
                self.reply(self._cleared())
            else:
                self.session.cancel(self.current)  # its ContextDone answers Cleared
                self.current = None
        elif kind == "Close":
            if self.current is not None:
                self.session.end(self.current)  # what was sent is spoken, then the socket closes
                self.current = None
            self.close_when_done()
        else:
            raise BadRequest(f"type {kind!r} is not one of Speak, Flush, Clear, Close", field="type")

    def _context(self) -> str:
        if self.current is None:
            self.count += 1
            self.current = f"u{self.count}"
            self.open_context(self.current, self.context_params, self.format, field="sample_rate")
        return self.current

    def _flushed(self) -> dict[str, Any]:
        self.sequence += 1
        return {"type": "Flushed", "sequence_id": self.sequence}

    def _cleared(self) -> dict[str, Any]:
        self.sequence += 1
        return {"type": "Cleared", "sequence_id": self.sequence}

    async def on_event(self, context_id: str, ev: SessionEvent) -> None:
        if isinstance(ev, AudioFrame):
            data = await self.encode(context_id, ev.pcm)
            if data:
                await self.send_bytes(data)
        elif isinstance(ev, FlushDone):
            await self.send_json(self._flushed())
        elif isinstance(ev, ContextError):
            await self.send_json(self.error_message(ev.error, context_id))
        elif isinstance(ev, ContextDone) and not ev.already_done:
            tail = await self.finish(context_id, cancelled=ev.reason != "end")
            if tail:
                await self.send_bytes(tail)
            if ev.reason == "cancelled":
                await self.send_json(self._cleared())
            if self.current == context_id:
                self.current = None
