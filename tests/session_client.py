"""A session-mode client for the tests (PROTOCOL.md §2) that checks the protocol's promises on everything it
receives: every server message of a context carries its id; audio frames (binary, 16-byte header) belong to a
live context's slot, to its current segment, and continue that context's sample count without a gap or
overlap; nothing of a context follows its context.done (except another context.done with already_done). An
error for a context before its context.started ends it (its open was refused: no context.done follows). A
uniquely named module, like live_server.py."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

HEADER = struct.Struct("<BBHHHII")
BYTES_PER_SAMPLE = {"pcm_s16le": 2, "pcm_f32le": 4, "pcm_mulaw": 1, "pcm_alaw": 1}


@dataclass
class Ctx:
    """What the client saw of one context (one incarnation of an id)."""

    id: str
    slot: int | None = None
    sent_text: str = ""  # what the client sent for it
    segments: list[dict[str, Any]] = field(default_factory=list)  # segment.start messages
    ended_segments: list[dict[str, Any]] = field(default_factory=list)
    words: list[dict[str, Any]] = field(default_factory=list)
    audio: bytearray = field(default_factory=bytearray)
    samples: int = 0  # audio samples received (negotiated rate)
    frames: int = 0
    done: dict[str, Any] | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)  # every JSON message naming it


class SessionClient:
    """One session-mode connection with the protocol checks of the module docstring applied to every frame."""

    def __init__(self, url: str, *, audio: dict[str, Any] | None = None, framing: str = "binary",
                 **defaults: Any):
        self.ws: ClientConnection = connect(url, open_timeout=10, close_timeout=5, max_size=None).__enter__()
        start = {"type": "session.start", **defaults, "framing": framing}
        if audio is not None:
            start["audio"] = audio
        self.ws.send(json.dumps(start))
        self.started = json.loads(self.ws.recv(timeout=30))
        assert self.started["type"] == "session.started", self.started
        self.encoding = self.started["audio"]["encoding"]
        self.framing = framing
        self.contexts: dict[str, Ctx] = {}  # live or last incarnation per id
        self.finished: list[Ctx] = []  # every context that got its context.done
        self.by_slot: dict[int, Ctx] = {}
        self.other: list[dict[str, Any]] = []  # messages without a context (pong, warnings, ...)
        self.log: list[tuple[str, Any]] = []  # ("<" or ">", message) both ways, for transcripts
        self.close_code: int | None = None
        self.close_reason = ""

    # -- sending -----------------------------------------------------------------------------------------

    def send(self, obj: dict[str, Any]) -> None:
        self.log.append((">", obj))
        cid = obj.get("context_id")
        if obj.get("type") in ("text", "speak") and isinstance(cid, str):
            ctx = self.contexts.get(cid)
            if ctx is None or ctx.done is not None:
                ctx = self.contexts[cid] = Ctx(cid)
            ctx.sent_text += obj["text"]
        self.ws.send(json.dumps(obj))

    # -- receiving ---------------------------------------------------------------------------------------

    def recv(self, timeout: float | None = 30) -> Any:
        """The next message, checked and recorded (a dict, or ("audio", header tuple, payload))."""
        raw = self.ws.recv(timeout=timeout)
        if isinstance(raw, bytes):
            return self._audio(raw)
        msg = json.loads(raw)
        self.log.append(("<", msg))
        if msg.get("type") == "audio":  # json framing
            import base64

            payload = base64.b64decode(msg["audio"])
            ctx = self.contexts[msg["context_id"]]
            return self._audio_of(ctx, msg["flags"], msg["segment_index"], msg["seq"], msg["sample_offset"], payload)
        self._json(msg)
        return msg

    def pump(self, timeout: float = 0.0) -> list[Any]:
        """Everything that arrives within timeout (0: what is already here)."""
        out = []
        while True:
            try:
                out.append(self.recv(timeout=timeout))
            except TimeoutError:
                return out

    def until(self, pred: Any, timeout: float = 60) -> Any:
        """Read until a message for which pred(msg) is true; returns it."""
        while True:
            msg = self.recv(timeout=timeout)
            if pred(msg):
                return msg

    def until_done(self, cid: str, timeout: float = 60) -> dict[str, Any]:
        ctx = self.contexts[cid]
        while ctx.done is None:
            self.recv(timeout=timeout)
        return ctx.done

    def close_and_drain(self, timeout: float = 30) -> None:
        """Read until the server closes the socket."""
        try:
            while True:
                self.recv(timeout=timeout)
        except ConnectionClosed as e:
            if e.rcvd is not None:
                self.close_code, self.close_reason = e.rcvd.code, e.rcvd.reason

    def close(self) -> None:
        self.ws.close()

    # -- checks --------------------------------------------------------------------------------------------

    def _json(self, msg: dict[str, Any]) -> None:
        kind = msg["type"]
        cid = msg.get("context_id")
        if kind in ("context.started", "segment.start", "segment.end", "words", "flush.done", "context.done"):
            assert isinstance(cid, str), f"{kind} without context_id: {msg}"
        if cid is None:
            self.other.append(msg)
            return
        if kind == "context.started":
            ctx = self.contexts.get(cid)
            if ctx is None or ctx.slot is not None:  # opened by a message without text (flush, end, open)
                ctx = self.contexts[cid] = Ctx(cid)
            assert msg["slot"] not in self.by_slot, f"slot {msg['slot']} of a live context reused: {msg}"
            ctx.slot = msg["slot"]
            self.by_slot[ctx.slot] = ctx
            ctx.messages.append(msg)
            return
        ctx = self.contexts.get(cid)
        if ctx is None:
            assert kind in ("context.done", "error"), f"{kind} for a context never started: {msg}"
            if kind == "context.done":
                assert msg.get("already_done") is True, msg
            else:
                self.other.append(msg)
            return
        if kind == "error" and ctx.slot is None and ctx.done is None:
            # an error before the context's context.started: the message that would have opened it was refused
            # (too many contexts, a bad field, an engine too busy to start it). A context that never started
            # gets no context.done (PROTOCOL §2), so it ends here, with the client's own reason "refused".
            ctx.messages.append(msg)
            ctx.done = {"type": "context.done", "context_id": cid, "reason": "refused"}
            self.finished.append(ctx)
            return
        if ctx.done is not None:
            # nothing of a context after its context.done, but the answer to a later cancel or a refusal
            assert (kind == "context.done" and msg.get("already_done") is True) or kind == "error", \
                f"{kind} after context.done of {cid}: {msg}"
            self.other.append(msg)
            return
        ctx.messages.append(msg)
        if kind == "segment.start":
            assert msg["segment_index"] == len(ctx.segments), msg
            ctx.segments.append(msg)
        elif kind == "segment.end":
            assert ctx.segments and msg["segment_index"] == ctx.segments[-1]["segment_index"], msg
            ctx.ended_segments.append(msg)
        elif kind == "words":
            ctx.words.append(msg)
        elif kind == "context.done":
            if msg.get("already_done"):
                return  # a cancel that raced with nothing live under this id (unseen incarnation)
            ctx.done = msg
            self.finished.append(ctx)
            if ctx.slot is not None:
                del self.by_slot[ctx.slot]

    def _audio(self, raw: bytes) -> tuple[str, Any, bytes]:
        version, flags, slot, seg, _reserved, seq, offset = HEADER.unpack_from(raw)
        assert version == 1
        ctx = self.by_slot.get(slot)
        assert ctx is not None, f"audio for slot {slot}, which is not a live context"
        return self._audio_of(ctx, flags, seg, seq, offset, raw[HEADER.size:])

    def _audio_of(self, ctx: Ctx, flags: int, seg: int, seq: int, offset: int,
                  payload: bytes) -> tuple[str, Any, bytes]:
        assert ctx.done is None, f"audio for {ctx.id} after its context.done"
        assert seq == ctx.frames, f"{ctx.id}: frame seq {seq}, expected {ctx.frames}"
        assert offset == ctx.samples, f"{ctx.id}: sample_offset {offset}, expected {ctx.samples} (gap/overlap)"
        assert ctx.segments and seg == ctx.segments[-1]["segment_index"] % 65536, \
            f"{ctx.id}: audio of segment {seg} outside its segment"
        ctx.frames += 1
        ctx.samples += len(payload) // BYTES_PER_SAMPLE[self.encoding]
        ctx.audio += payload
        self.log.append(("<", f"[audio {ctx.id} seg {seg} flags {flags} {len(payload)} B]"))
        return ("audio", (flags, ctx.id, seg, seq, offset), payload)


def heard_cut(ctx: Ctx, limit: int) -> tuple[int, str]:
    """Where a cancel whose played_ms is `limit` samples (negotiated rate) cuts the text, from what the client
    received (docs/protocol.md, Cancel): the end of the segments whose audio ended by then; inside the first one
    that did not, the start of its first word whose audio had not ended, if its words message came and one of
    its words had ended. Returns (unspoken_start, granularity)."""
    ended = {e["segment_index"]: e["audio_end_sample"] for e in ctx.ended_segments}
    words = {m["segment_index"]: m["words"] for m in ctx.words}
    end = 0
    for seg in ctx.segments:
        i = seg["segment_index"]
        if i in ended and ended[i] <= limit:
            end = seg["text_end"]
            continue
        ws = words.get(i, [])
        if ws and ws[0]["end_sample"] <= limit:
            end = next(w["text_start"] for w in ws if w["end_sample"] > limit)
        return end, "word" if ws else "segment"
    return end, "word" if ctx.segments else "segment"
