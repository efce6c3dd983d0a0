"""Session-mode wire messages (PROTOCOL.md §2): client frames → typed messages (validated: every bad field is a
BadRequest naming it), and the binary audio frame header. Pure parsing/packing: imports protocol and errors;
never Starlette, never the service.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from realtime_tts.errors import BadRequest
from realtime_tts.protocol import COMMON_FIELDS, Params, _params, _Reader, _text

CONTEXT_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}")

FRAMINGS = ("binary", "json")
ENCODINGS = ("pcm_s16le", "pcm_f32le", "pcm_mulaw", "pcm_alaw")  # = audio_out.ENCODINGS
CLIENT_TYPES = ("context.open", "text", "speak", "flush", "end", "cancel", "ping", "session.close")

START_FIELDS = COMMON_FIELDS | {"type", "audio", "framing"}
_OPEN_FIELDS = COMMON_FIELDS | {"type", "context_id"}
_FIELDS = {
    "text": frozenset({"type", "context_id", "text"}),
    "speak": frozenset({"type", "context_id", "text"}),
    "flush": frozenset({"type", "context_id"}),
    "end": frozenset({"type", "context_id"}),
    "cancel": frozenset({"type", "context_id", "played_ms"}),
    "ping": frozenset({"type", "id"}),
    "session.close": frozenset({"type"}),
}

# Binary audio frame header: u8 version, u8 flags, u16 slot, u16 segment_index, u16 reserved, u32 seq,
# u32 sample_offset (little-endian), then the payload.
HEADER = struct.Struct("<BBHHHII")
HEADER_VERSION = 1
FLAG_SEGMENT_START = 1
FLAG_SEGMENT_END = 2
FLAG_CONTEXT_LAST = 4


def pack_header(flags: int, slot: int, segment_index: int, seq: int, sample_offset: int) -> bytes:
    return HEADER.pack(HEADER_VERSION, flags, slot & 0xFFFF, segment_index & 0xFFFF, 0, seq & 0xFFFFFFFF,
                       sample_offset & 0xFFFFFFFF)


@dataclass(frozen=True, slots=True)
class SessionStart:
    params_obj: dict[str, Any]  # the request fields (§4) as sent: contexts overlay theirs on these
    params: Params
    encoding: str
    sample_rate: int | None  # None: the engine's rate
    framing: str
    warnings: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ClientMessage:
    type: str
    context_id: str | None = None
    text: str = ""
    played_ms: float | None = None
    params: Params | None = None  # context.open
    ping_id: Any = None
    warnings: tuple[str, ...] = ()


def parse_start(obj: Mapping[str, Any]) -> SessionStart:
    """{"type": "session.start", ...request fields, "audio": {"encoding", "sample_rate"}, "framing"}."""
    if obj.get("type") != "session.start":
        raise BadRequest(f'the first frame of session mode must have "type": "session.start", got '
                         f'{str(obj.get("type"))[:64]!r}', field="type")
    r = _Reader(obj, START_FIELDS, coerce=False)
    audio = obj.get("audio", {})
    if audio is None:
        audio = {}
    if not isinstance(audio, Mapping):
        raise BadRequest("audio must be an object {\"encoding\", \"sample_rate\"}", field="audio")
    a = _Reader(audio, frozenset({"encoding", "sample_rate"}), coerce=False)
    try:
        encoding = a.choice("encoding", ENCODINGS, "pcm_s16le")
        sample_rate = a.integer("sample_rate", 8000, 48000)
    except BadRequest as e:  # name the field as the client wrote it: audio.<name>
        raise BadRequest(f"audio.{e.message}", field=f"audio.{e.field}") from None
    framing = r.choice("framing", FRAMINGS, "binary")
    params_obj = {k: v for k, v in obj.items() if k in COMMON_FIELDS}
    params = _params(r)
    if params.sample_rate is not None and sample_rate is None:
        sample_rate = params.sample_rate  # a top-level sample_rate (§4) means the same
    warnings = r.warnings + tuple(f"audio.{w}" for w in a.warnings)
    return SessionStart(params_obj, params, encoding, sample_rate, framing, warnings)


def parse_message(obj: Mapping[str, Any], *, defaults: Mapping[str, Any], max_chars: int) -> ClientMessage:
    """A client frame after session.start. defaults: the session.start request fields (context.open overlays its
    own on them)."""
    kind = obj.get("type")
    if kind not in CLIENT_TYPES:
        raise BadRequest(f"type must be one of {', '.join(CLIENT_TYPES)}; got {str(kind)[:64]!r}", field="type")
    if kind == "context.open":
        r = _Reader(obj, _OPEN_FIELDS, coerce=False)
        merged = {**defaults, **{k: v for k, v in obj.items() if k in COMMON_FIELDS}}
        params = _params(_Reader(merged, COMMON_FIELDS, coerce=False))
        return ClientMessage(kind, _context_id(obj, required=True), params=params, warnings=r.warnings)
    r = _Reader(obj, _FIELDS[kind], coerce=False)
    if kind == "ping":
        return ClientMessage(kind, ping_id=obj.get("id"), warnings=r.warnings)
    if kind == "session.close":
        return ClientMessage(kind, warnings=r.warnings)
    if kind == "cancel":
        return ClientMessage(kind, _context_id(obj, required=True, wildcard=True),
                             played_ms=r.number("played_ms", 0.0, 86_400_000.0), warnings=r.warnings)
    text = _text(r, "text", max_chars, required=False) if kind in ("text", "speak") else ""
    if kind in ("text", "speak") and "text" not in obj:
        raise BadRequest(f'"{kind}" needs "text" (a string)', field="text")
    return ClientMessage(kind, _context_id(obj, required=True), text=text, warnings=r.warnings)


def _context_id(obj: Mapping[str, Any], *, required: bool, wildcard: bool = False) -> str | None:
    cid = obj.get("context_id")
    if cid is None and not required:
        return None
    if wildcard and cid == "*":
        return "*"
    if not isinstance(cid, str) or not CONTEXT_ID_RE.fullmatch(cid):
        raise BadRequest("context_id is required: a string matching [A-Za-z0-9._:-]{1,128}"
                         + (' (or "*" for every context)' if wildcard else ""), field="context_id")
    return cid
