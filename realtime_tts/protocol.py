"""Wire parsing and validation of request fields (PROTOCOL.md §4) into typed requests.

Every invalid value raises errors.BadRequest naming the field and the allowed range; unknown fields are
collected as warnings, never errors. Leaf module: imports only config-free package leaves (errors).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from realtime_tts.errors import BadRequest, PayloadTooLarge, UnsupportedFrame

# OpenAI's voice names: accepted everywhere, mapped by each engine to one of its presets (docs/protocol.md).
OPENAI_VOICES = ("alloy", "ash", "ballad", "cedar", "coral", "echo", "fable", "marin", "nova", "onyx", "sage",
                 "shimmer", "verse")
# Voice names that mean "the engine's default voice".
DEFAULT_VOICES = ("auto", "base", "default")
CHUNK_MODES = ("concurrent", "sequential", "none")
STREAM_FORMATS = ("audio", "sse")
WS_ENCODINGS = ("pcm_s16le", "pcm_f32le", "pcm_mulaw", "pcm_alaw")  # = audio_out.ENCODINGS

VoiceMode = Literal["auto", "design", "clone"]

# Fields every entry point understands (§4).
_COMMON = frozenset({
    "voice", "voice_id", "speaker", "instruct", "language", "speed", "duration", "num_step",
    "guidance_scale", "temperature", "top_p", "seed", "chunk_mode", "sample_rate", "model",
})
# An inline clone reference (base64 audio + its transcript), on every entry point (api/voices.py encodes it).
_INLINE_REFERENCE = frozenset({"ref_audio", "ref_audio_base64", "ref_text"})
COMMON_FIELDS = _COMMON  # for the session-mode parser (protocol_session)
WS_STREAM_FIELDS = _COMMON | _INLINE_REFERENCE | {"text", "events", "encoding", "cancel", "played_ms"}
WS_TEXT_INIT_FIELDS = WS_STREAM_FIELDS | {"flush", "end"}  # the init frame may also flush or end at once
SPEECH_FIELDS = _COMMON | _INLINE_REFERENCE | {"input", "text", "instructions", "response_format", "stream_format",
                                               "stream"}
SYNTH_FIELDS = _COMMON | _INLINE_REFERENCE | {"text", "response_format"}
CLONE_FIELDS = SPEECH_FIELDS
DESIGN_FIELDS = SPEECH_FIELDS


@dataclass(frozen=True, slots=True)
class Params:
    """How to speak: everything in a request except the text. Engine-neutral; the service maps it to
    engine.base.SegmentRequest fields."""

    voice: str = "auto"  # as the client wrote it
    voice_mode: VoiceMode = "auto"
    preset: str | None = None  # engine preset / OpenAI voice name / speaker
    voice_id: str | None = None
    instruct: str | None = None
    language: str | None = None
    speed: float = 1.0
    duration: float | None = None
    num_step: int | None = None
    guidance_scale: float | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    chunk_mode: str = "concurrent"
    sample_rate: int | None = None
    model: str | None = None
    events: bool = False


@dataclass(frozen=True, slots=True)
class SpeechRequest:
    """One whole-text request (WS /v1/stream first frame, HTTP bodies, /v1/stream/text init frame)."""

    text: str
    params: Params
    response_format: str = "pcm"
    stream_format: str = "audio"
    stream: bool | None = None  # HTTP: None = chunked audio, True = SSE, False = one buffered body
    encoding: str = "pcm_s16le"  # WS simple mode: sample encoding of the binary frames
    ref_text: str | None = None
    ref_audio: str | None = None  # inline clone reference: base64 audio (a data: URL too), with ref_text
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TextMessage:
    """A later frame on WS /v1/stream/text. Applied in this order: text, flush, end, cancel."""

    text: str = ""
    flush: bool = False
    end: bool = False
    cancel: bool = False
    played_ms: float | None = None  # with cancel: the audio the client played (text_spoken is judged by it)
    warnings: tuple[str, ...] = ()


_TEXT_MESSAGE_FIELDS = frozenset({"text", "flush", "end", "cancel", "played_ms"})
_MAX_WARNINGS = 16  # warnings travel in a header / the terminal frame: keep them short


def loads_object(raw: str | bytes | None, *, max_bytes: int) -> dict[str, Any]:
    """One WebSocket frame → a JSON object. Binary or non-JSON → UnsupportedFrame (close 1003)."""
    if raw is None:
        raise UnsupportedFrame("expected a JSON text frame, got an empty frame")
    if isinstance(raw, bytes):
        if len(raw) > max_bytes:
            raise PayloadTooLarge(f"frame of {len(raw)} bytes exceeds the limit of {max_bytes}",
                                  limit="max_ws_message_bytes")
        raise UnsupportedFrame("expected a JSON text frame, got a binary frame")
    if len(raw) > max_bytes:
        raise PayloadTooLarge(f"frame of {len(raw)} characters exceeds the limit of {max_bytes} bytes",
                              limit="max_ws_message_bytes")
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as e:
        raise UnsupportedFrame(f"frame is not valid JSON: {e.msg} at position {e.pos}") from None
    except RecursionError:
        raise BadRequest("frame is nested too deeply", field="(frame)") from None
    if not isinstance(obj, dict):
        raise BadRequest(f"frame must be a JSON object, got {type(obj).__name__}", field="(frame)")
    return obj


def body_object(raw: bytes) -> dict[str, Any]:
    """An HTTP JSON body → object; malformed → BadRequest (400)."""
    if not raw.strip():
        raise BadRequest("request body is empty; expected a JSON object", field="(body)")
    try:
        obj = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BadRequest(f"request body is not valid JSON: {e}", field="(body)") from None
    except RecursionError:
        raise BadRequest("request body is nested too deeply", field="(body)") from None
    if not isinstance(obj, dict):
        raise BadRequest(f"request body must be a JSON object, got {type(obj).__name__}", field="(body)")
    return obj


class _Reader:
    """Typed access to one request's fields. coerce=True reads strings (multipart forms) as numbers."""

    def __init__(self, obj: Mapping[str, Any], allowed: frozenset[str], coerce: bool):
        self.obj = obj
        self.coerce = coerce
        unknown = [k for k in obj if k not in allowed]
        self.warnings = tuple(f"unknown field {k[:64]!r} ignored" for k in unknown[:_MAX_WARNINGS])
        if len(unknown) > _MAX_WARNINGS:
            self.warnings += (f"... and {len(unknown) - _MAX_WARNINGS} more unknown fields ignored",)

    def present(self, name: str) -> bool:
        return self.obj.get(name) is not None

    def string(self, name: str, *, allow_empty: bool = True) -> str | None:
        value = self.obj.get(name)
        if value is None:
            return None
        if not isinstance(value, str):
            raise BadRequest(f"{name} must be a string, got {_type(value)}", field=name)
        if not allow_empty and not value.strip():
            raise BadRequest(f"{name} must not be empty", field=name)
        return value

    def number(self, name: str, lo: float, hi: float, *, lo_open: bool = False) -> float | None:
        value = self.obj.get(name)
        if value is None:
            return None
        if self.coerce and isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise BadRequest(f"{name} must be a number, got {value!r}", field=name) from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadRequest(f"{name} must be a number, got {_type(value)}", field=name)
        value = float(value)
        bad = not math.isfinite(value) or value > hi or value < lo or (lo_open and value == lo)
        if bad:
            lo_txt = f"> {lo:g}" if lo_open else f">= {lo:g}"
            raise BadRequest(f"{name} must be {lo_txt} and <= {hi:g}, got {value:g}", field=name)
        return value

    def integer(self, name: str, lo: int, hi: int) -> int | None:
        value = self.obj.get(name)
        if value is None:
            return None
        if self.coerce and isinstance(value, str):
            try:
                value = int(value)
            except ValueError:
                raise BadRequest(f"{name} must be an integer, got {value!r}", field=name) from None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise BadRequest(f"{name} must be an integer, got {_type(value)}", field=name)
        if not lo <= value <= hi:
            raise BadRequest(f"{name} must be in {lo}..{hi}, got {value}", field=name)
        return value

    def boolean(self, name: str) -> bool | None:
        value = self.obj.get(name)
        if value is None:
            return None
        if self.coerce and isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
            return value.lower() in ("true", "1")
        if not isinstance(value, bool):
            raise BadRequest(f"{name} must be true or false, got {_type(value)}", field=name)
        return value

    def choice(self, name: str, allowed: tuple[str, ...], default: str) -> str:
        value = self.string(name)
        if value is None or value == "":
            return default
        if value.lower() not in allowed:
            raise BadRequest(f"{name} must be one of {', '.join(allowed)}; got {value!r}", field=name)
        return value.lower()


def _type(value: Any) -> str:
    return "null" if value is None else {dict: "object", list: "array", str: "string", bool: "boolean"}.get(
        type(value), type(value).__name__)


def _params(r: _Reader, *, instruct_field: str = "instruct") -> Params:
    voice = (r.string("voice") or "auto").strip() or "auto"
    voice_id = r.string("voice_id", allow_empty=False)
    speaker = r.string("speaker", allow_empty=False)
    instruct = r.string(instruct_field)
    if instruct is None and instruct_field != "instruct":
        instruct = r.string("instruct")
    instruct = instruct.strip() if instruct and instruct.strip() else None
    inline = _ref_audio(r) is not None
    mode, preset = _voice_mode(voice, voice_id, speaker, instruct, inline)
    language = r.string("language")
    language = language.strip() if language and language.strip() else None
    sample_rate = r.integer("sample_rate", 8000, 48000)
    return Params(
        voice=voice,
        voice_mode=mode,
        preset=preset,
        voice_id=voice_id,
        instruct=instruct,
        language=language,
        speed=r.number("speed", 0.25, 4.0) or 1.0,
        duration=r.number("duration", 0.0, 600.0, lo_open=True),
        num_step=r.integer("num_step", 1, 64),
        guidance_scale=r.number("guidance_scale", 0.0, 20.0),
        temperature=r.number("temperature", 0.0, 10.0),
        top_p=r.number("top_p", 0.0, 1.0, lo_open=True),
        seed=r.integer("seed", 0, 2**63 - 1),
        chunk_mode=r.choice("chunk_mode", CHUNK_MODES, "concurrent"),
        sample_rate=sample_rate,
        model=(r.string("model") or "").strip() or None,
        events=bool(r.boolean("events")),
    )


def _ref_audio(r: _Reader) -> str | None:
    """An inline reference recording as sent (base64); a file part of a form is not a field here."""
    for name in ("ref_audio_base64", "ref_audio"):
        value = r.obj.get(name)
        if isinstance(value, str) and value.strip():
            return value
        if value is not None and not isinstance(value, str):
            raise BadRequest(f"{name} must be a base64 string of the reference audio", field=name)
    return None


def _voice_mode(voice: str, voice_id: str | None, speaker: str | None,
                instruct: str | None, inline: bool = False) -> tuple[VoiceMode, str | None]:
    """The voice field → (mode, preset). Mapping documented in docs/protocol.md."""
    name = voice.lower()
    mode: VoiceMode
    if name in DEFAULT_VOICES or name == "custom":
        mode, preset = "auto", speaker
    elif name == "design":
        if instruct is None:
            raise BadRequest('voice "design" needs a non-empty instruct (the voice description)', field="instruct")
        mode, preset = "design", None
    elif name == "clone":
        if voice_id is None and not inline:
            raise BadRequest('voice "clone" needs voice_id (a saved voice) or reference audio (ref_audio_base64 '
                             "+ ref_text, or POST /v1/audio/clone)", field="voice_id")
        mode, preset = "clone", None
    elif name in OPENAI_VOICES:
        mode, preset = "auto", name
    else:
        mode, preset = "auto", voice  # an engine preset; the engine validates it
    if mode == "auto" and (voice_id is not None or inline):
        mode, preset = "clone", None
    elif mode == "auto" and instruct is not None:
        mode = "design"
    return mode, preset


def _text(r: _Reader, name: str, max_chars: int, *, required: bool) -> str:
    text = r.string(name)
    if text is None:
        if required:
            raise BadRequest(f"{name} is required (a non-empty string)", field=name)
        return ""
    if required and not text.strip():
        raise BadRequest(f"{name} must not be empty or whitespace only", field=name)
    if len(text) > max_chars:
        raise BadRequest(f"{name} has {len(text)} characters; at most {max_chars} are accepted", field=name,
                         limit="max_text_chars")
    return text


def parse_ws_stream(obj: Mapping[str, Any], *, max_chars: int) -> SpeechRequest:
    """First frame of WS /v1/stream: text required."""
    return _ws_first(obj, max_chars=max_chars, text_required=True)


def parse_ws_text_init(obj: Mapping[str, Any], *, max_chars: int) -> SpeechRequest:
    """Init frame of WS /v1/stream/text: a "text" in it is the first chunk (may be absent)."""
    return _ws_first(obj, max_chars=max_chars, text_required=False, allowed=WS_TEXT_INIT_FIELDS)


def _ws_first(obj: Mapping[str, Any], *, max_chars: int, text_required: bool,
              allowed: frozenset[str] = WS_STREAM_FIELDS) -> SpeechRequest:
    r = _Reader(obj, allowed, coerce=False)
    text = _text(r, "text", max_chars, required=text_required)
    encoding = r.choice("encoding", WS_ENCODINGS, "pcm_s16le")
    return SpeechRequest(text=text, params=_params(r), response_format="pcm", encoding=encoding,
                         ref_text=r.string("ref_text"), ref_audio=_ref_audio(r), warnings=r.warnings)


def parse_text_message(obj: Mapping[str, Any], *, max_chars: int) -> TextMessage:
    r = _Reader(obj, _TEXT_MESSAGE_FIELDS, coerce=False)
    text = _text(r, "text", max_chars, required=False)
    return TextMessage(text=text, flush=bool(r.boolean("flush")), end=bool(r.boolean("end")),
                       cancel=bool(r.boolean("cancel")), played_ms=r.number("played_ms", 0.0, 86_400_000.0),
                       warnings=r.warnings)


def parse_speech(obj: Mapping[str, Any], *, max_chars: int, formats: tuple[str, ...],
                 allowed: frozenset[str] = SPEECH_FIELDS, coerce: bool = False,
                 default_format: str = "wav") -> SpeechRequest:
    """POST /v1/audio/speech (OpenAI fields; "input", or "text" as an alias) and the multipart endpoints.
    Without response_format: default_format, except with "stream": true (omnivoice-triton-server's SSE, whose
    deltas are raw PCM16): pcm."""
    voice = obj.get("voice")
    if isinstance(voice, Mapping):  # the OpenAI SDK's custom voice reference {"id": "voice_1234"}
        voice_ref = voice.get("id")
        if not isinstance(voice_ref, str) or not voice_ref.strip():
            raise BadRequest('voice as an object needs "id" (a non-empty string)', field="voice")
        obj = {**obj, "voice": voice_ref}
    r = _Reader(obj, allowed, coerce=coerce)
    text_field = "input" if r.present("input") or not r.present("text") else "text"
    text = _text(r, text_field, max_chars, required=True)
    stream = r.boolean("stream")
    stream_format = r.choice("stream_format", STREAM_FORMATS, "sse" if stream else "audio")
    return SpeechRequest(
        text=text,
        params=_params(r, instruct_field="instructions"),
        response_format=r.choice("response_format", formats, "pcm" if stream else default_format),
        stream_format=stream_format,
        stream=stream,
        ref_text=r.string("ref_text"),
        ref_audio=_ref_audio(r),
        warnings=r.warnings,
    )


def parse_synth(obj: Mapping[str, Any], *, max_chars: int) -> SpeechRequest:
    """POST /v1/synth (LunaVox shape): always one WAV body."""
    r = _Reader(obj, SYNTH_FIELDS, coerce=False)
    text = _text(r, "text", max_chars, required=True)
    r.choice("response_format", ("wav",), "wav")
    return SpeechRequest(text=text, params=_params(r), response_format="wav", stream=False,
                         ref_text=r.string("ref_text"), ref_audio=_ref_audio(r), warnings=r.warnings)


@dataclass(slots=True)
class Warnings:
    """Warnings gathered over a connection (unknown fields), reported once in the terminal frame."""

    items: list[str] = field(default_factory=list)

    def add(self, new: tuple[str, ...]) -> None:
        for w in new:
            if w not in self.items and len(self.items) < 2 * _MAX_WARNINGS:
                self.items.append(w)
