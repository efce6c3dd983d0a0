"""What the server sends, as typed events, and the decoding of its frames (PROTOCOL.md §1 and §2.3).

Owns: the event dataclasses, the 16-byte binary audio header, JSON-framed (base64) audio, and turning a
server JSON frame into an event. Imports only the standard library: no server code, no websockets.
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass, field
from typing import Any

# u8 version=1, u8 flags, u16 slot, u16 segment_index, u16 reserved, u32 seq, u32 sample_offset (little-endian)
HEADER = struct.Struct("<BBHHHII")
FLAG_SEGMENT_START = 1
FLAG_SEGMENT_END = 2
FLAG_CONTEXT_LAST = 4


@dataclass(frozen=True, slots=True)
class Audio:
    """A piece of audio in the negotiated encoding (simple mode: always pcm_s16le at the announced rate)."""

    data: bytes
    context_id: str | None = None
    segment_index: int | None = None
    seq: int | None = None
    sample_offset: int | None = None
    flags: int = 0


@dataclass(frozen=True, slots=True)
class SegmentStart:
    segment_index: int
    text: str
    text_start: int
    text_end: int
    audio_start_sample: int
    context_id: str | None = None


@dataclass(frozen=True, slots=True)
class SegmentEnd:
    segment_index: int
    audio_end_sample: int
    queue_ms: float = 0.0
    gen_ms: float = 0.0
    context_id: str | None = None


@dataclass(frozen=True, slots=True)
class Word:
    word: str
    text_start: int  # code-point offsets into the context's raw text
    text_end: int
    start_sample: int  # at the negotiated rate
    end_sample: int


@dataclass(frozen=True, slots=True)
class Words:
    """Word timings of a segment (session mode); `estimated` when the engine gave none (spread by length)."""

    segment_index: int
    words: tuple[Word, ...]
    estimated: bool = False
    context_id: str | None = None


@dataclass(frozen=True, slots=True)
class ContextStarted:
    context_id: str
    slot: int | None


@dataclass(frozen=True, slots=True)
class FlushDone:
    context_id: str


@dataclass(frozen=True, slots=True)
class Done:
    """The last event of a stream: simple mode's terminal frame, or session mode's context.done."""

    reason: str
    stats: dict[str, Any]
    sample_rate: int | None = None
    context_id: str | None = None
    text_spoken: str | None = None
    already_done: bool = False
    sentences: int | None = None
    warnings: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ServerError:
    code: str
    message: str
    fatal: bool = True
    retryable: bool = False
    retry_after_ms: float | None = None
    field: str | None = None
    context_id: str | None = None


@dataclass(frozen=True, slots=True)
class Pong:
    load: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Unknown:
    """A server message this client does not know (newer server): kept, never dropped silently."""

    raw: dict[str, Any]


Event = Audio | SegmentStart | SegmentEnd | Words | ContextStarted | FlushDone | Done | ServerError | Pong | Unknown


class TTSServerError(RuntimeError):
    """The server answered with an error frame (or closed with an error code)."""

    def __init__(self, error: ServerError, close_code: int | None = None) -> None:
        super().__init__(f"{error.code}: {error.message}" + (f" (close {close_code})" if close_code else ""))
        self.error = error
        self.close_code = close_code


def parse_binary(data: bytes, *, session: bool) -> tuple[int | None, Audio]:
    """A binary frame → (slot, audio). Simple mode frames are raw PCM; session frames carry the header."""
    if not session:
        return None, Audio(data)
    if len(data) < HEADER.size:
        raise ValueError(f"binary frame of {len(data)} bytes is shorter than the {HEADER.size}-byte header")
    version, flags, slot, segment_index, _, seq, offset = HEADER.unpack_from(data)
    if version != 1:
        raise ValueError(f"unknown audio header version {version}")
    return slot, Audio(data[HEADER.size:], segment_index=segment_index, seq=seq, sample_offset=offset, flags=flags)


def parse_json(obj: dict[str, Any]) -> Event:
    """A server JSON frame (either mode) → an event."""
    kind = obj.get("type")
    ctx = obj.get("context_id")
    if obj.get("done") is True:  # simple mode's terminal frame
        return Done(reason=str(obj.get("reason", "end")), stats=obj.get("stats") or {},
                    sample_rate=obj.get("sample_rate"), text_spoken=obj.get("text_spoken"),
                    sentences=obj.get("sentences"), warnings=list(obj.get("warnings") or []), raw=obj)
    if kind == "context.done":
        return Done(reason=str(obj.get("reason", "end")), stats=obj.get("stats") or {}, context_id=ctx,
                    text_spoken=obj.get("text_spoken"), already_done=bool(obj.get("already_done", False)),
                    warnings=list(obj.get("warnings") or []), raw=obj)
    if kind == "audio":  # framing "json"
        return Audio(base64.b64decode(obj["audio"]), context_id=ctx, segment_index=obj.get("segment_index"),
                     seq=obj.get("seq"), sample_offset=obj.get("sample_offset"), flags=int(obj.get("flags", 0)))
    if kind == "words":
        return Words(obj.get("segment_index", 0), tuple(
            Word(w.get("word", ""), w.get("text_start", 0), w.get("text_end", 0), w.get("start_sample", 0),
                 w.get("end_sample", 0)) for w in obj.get("words") or []), bool(obj.get("estimated", False)), ctx)
    if kind == "segment.start":
        return SegmentStart(obj["segment_index"], obj.get("text", ""), obj.get("text_start", 0),
                            obj.get("text_end", 0), obj.get("audio_start_sample", 0), ctx)
    if kind == "segment.end":
        return SegmentEnd(obj["segment_index"], obj.get("audio_end_sample", 0), float(obj.get("queue_ms") or 0.0),
                          float(obj.get("gen_ms") or 0.0), ctx)
    if kind == "context.started":
        return ContextStarted(str(ctx), obj.get("slot"))
    if kind == "flush.done":
        return FlushDone(str(ctx))
    if kind == "pong":
        return Pong(obj.get("load") or {})
    if kind == "error" or "error" in obj:
        nested = obj.get("error")
        err: dict[str, Any] = nested if isinstance(nested, dict) else obj
        return ServerError(code=str(err.get("code", "error")), message=str(err.get("message", "")),
                           fatal=bool(err.get("fatal", True)), retryable=bool(err.get("retryable", False)),
                           retry_after_ms=err.get("retry_after_ms"), field=err.get("field"), context_id=ctx)
    return Unknown(obj)
