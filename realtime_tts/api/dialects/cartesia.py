"""Cartesia's TTS WebSocket dialect (WS /tts/websocket), as pipecat's CartesiaTTSService and LiveKit's
cartesia.TTS speak it (docs/DIALECTS.md): several contexts per socket, transcript + continue, cancel, and
chunk / timestamps / done / error messages carrying context_id. Any Cartesia-Version header or
cartesia_version query is accepted. A thin translation onto service/session.py; imports api.dialects.connection,
audio_out, errors and the session's events only.
"""

from __future__ import annotations

import logging
from typing import Any

from realtime_tts.api.dialects.connection import DialectSocket
from realtime_tts.audio_out import OutputFormat
from realtime_tts.errors import BadRequest, TTSError
from realtime_tts.service.events import AudioFrame
from realtime_tts.service.session import ContextDone, ContextError, SessionEvent, Words

log = logging.getLogger(__name__)

# Cartesia's raw encodings → ours (the same four sample formats).
ENCODINGS = {"pcm_s16le": "pcm_s16le", "pcm_f32le": "pcm_f32le", "pcm_mulaw": "pcm_mulaw", "pcm_alaw": "pcm_alaw"}


def _object(obj: dict[str, Any], name: str) -> dict[str, Any]:
    value = obj.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequest(f"{name} must be an object", field=name)
    return value


def output_format(obj: dict[str, Any]) -> OutputFormat:
    fmt = _object(obj, "output_format")
    container = fmt.get("container", "raw")
    if container != "raw":
        raise BadRequest(f"output_format.container {container!r} is not supported on the WebSocket; use raw",
                         field="output_format.container")
    encoding = fmt.get("encoding", "pcm_s16le")
    if encoding not in ENCODINGS:
        raise BadRequest(f"output_format.encoding {encoding!r} is not one of {', '.join(ENCODINGS)}",
                         field="output_format.encoding")
    rate = fmt.get("sample_rate", 24000)
    if not isinstance(rate, int) or isinstance(rate, bool):
        raise BadRequest("output_format.sample_rate must be an integer", field="output_format.sample_rate")
    fmt_out = OutputFormat(container="raw", encoding=ENCODINGS[encoding], sample_rate=rate)
    fmt_out.check("output_format.sample_rate")
    return fmt_out


def _speed(obj: dict[str, Any]) -> float | None:
    """generation_config.speed (sonic-3: a number, 0.6..1.5); the older string speeds are left to default."""
    speed = _object(obj, "generation_config").get("speed")
    return float(speed) if isinstance(speed, int | float) and not isinstance(speed, bool) else None


class CartesiaSocket(DialectSocket):
    endpoint = "cartesia"

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self.timestamps: dict[str, bool] = {}  # per context: add_timestamps
        self.rates: dict[str, int] = {}  # per context: the engine rate its word sample offsets count at

    def error_message(self, e: TTSError, context_id: str | None) -> dict[str, Any]:
        # pipecat reads msg["context_id"] of every message: always present; never done:true (LiveKit)
        msg: dict[str, Any] = {"type": "error", "context_id": context_id or "", "status_code": e.status,
                               "done": False, "error": e.message, "title": e.code}
        if e.field:
            msg["field"] = e.field
        return msg

    def apply(self, context_id: str, obj: dict[str, Any]) -> None:
        if obj.get("cancel") is True:
            if context_id in self.pending:
                self.session.cancel(context_id)
            return
        transcript = obj.get("transcript", "")
        if not isinstance(transcript, str):
            raise BadRequest("transcript must be a string", field="transcript")
        self.check_not_cancelled(context_id)
        if context_id not in self.pending:
            if not transcript.strip() and obj.get("continue") is False:
                # an end with nothing to say (a repeated flush, an empty turn): done, without a synthesis
                self.reply({"type": "done", "context_id": context_id, "status_code": 206, "done": True})
                return
            self._open(context_id, obj)
        if transcript:
            self.session.text(context_id, transcript)
            if obj.get("max_buffer_delay_ms") == 0 or obj.get("flush") is True:
                self.session.flush(context_id)  # speak each transcript at once (absent: buffer to a sentence)
        if obj.get("continue") is False:
            self.session.end(context_id)

    def _open(self, context_id: str, obj: dict[str, Any]) -> None:
        voice = _object(obj, "voice")
        voice_id = voice.get("id") if voice.get("mode", "id") == "id" else None
        if voice_id is not None and not isinstance(voice_id, str):
            raise BadRequest("voice.id must be a string", field="voice.id")
        language = obj.get("language")
        if language is not None and not isinstance(language, str):
            raise BadRequest("language must be a string", field="language")
        params, warnings = self.params(voice=voice_id, voice_field="voice.id", language=language,
                                       speed=_speed(obj))
        for w in warnings:
            log.info("cartesia context %s: %s", context_id, w)
        self.open_context(context_id, params, output_format(obj), field="output_format.sample_rate")
        self.timestamps[context_id] = obj.get("add_timestamps") is True
        self.rates[context_id] = self._engine_rate(params)

    async def on_event(self, context_id: str, ev: SessionEvent) -> None:
        if isinstance(ev, AudioFrame):
            await self._chunk(context_id, await self.encode(context_id, ev.pcm))
        elif isinstance(ev, Words):
            if self.timestamps.get(context_id) and ev.words:
                rate = self.rates[context_id]
                await self.send_json({
                    "type": "timestamps", "context_id": context_id, "status_code": 206, "done": False,
                    "word_timestamps": {"words": [w.text for w in ev.words],
                                        "start": [round(w.start_sample / rate, 3) for w in ev.words],
                                        "end": [round(w.end_sample / rate, 3) for w in ev.words]}})
        elif isinstance(ev, ContextError):
            await self.send_json(self.error_message(ev.error, context_id))
        elif isinstance(ev, ContextDone):
            if ev.already_done:
                return
            cancelled = ev.reason != "end"
            await self._chunk(context_id, await self.finish(context_id, cancelled=cancelled))
            self.timestamps.pop(context_id, None)
            self.rates.pop(context_id, None)
            if ev.reason == "end":
                await self.send_json({"type": "done", "context_id": context_id, "status_code": 206, "done": True})

    async def _chunk(self, context_id: str, data: bytes) -> None:
        if data:  # LiveKit reads a message with empty data as something else
            await self.send_json({"type": "chunk", "context_id": context_id, "status_code": 206, "done": False,
                                  "data": self.b64(data)})
