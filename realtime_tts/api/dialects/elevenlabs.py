"""ElevenLabs' TTS WebSocket dialect, as pipecat's ElevenLabsTTSService and LiveKit's elevenlabs.TTS speak it
(docs/DIALECTS.md): WS /v1/text-to-speech/{voice_id}/multi-stream-input (contexts by context_id; replies carry
camelCase contextId) and /stream-input (one stream, no ids; {"text": ""} ends it).

Client: {"text", "context_id", "flush"?, "voice_settings"?}; {"context_id", "flush": true} with no text (the
final flush); {"context_id", "close_context": true}: right after a final flush it finishes the audio, else it
interrupts; {"text": ""} alone is a keepalive; {"close_socket": true}. auto_mode=true speaks each text at once.
Server: {"audio", "contextId"}; {"alignment", "normalizedAlignment", "contextId"} per sentence (chars,
charStartTimesMs, charDurationsMs, restarting at zero in every message: each one starts where the previous one
ended; with sync_alignment=true, as LiveKit asks, counted from the context's start); then {"isFinal": true,
"contextId"} in a message of its own. A thin translation onto service/session.py; imports
api.dialects.connection, audio_out, errors and the session's events only.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from realtime_tts.api.dialects.connection import DialectSocket
from realtime_tts.audio_out import OutputFormat
from realtime_tts.errors import BadRequest, TTSError
from realtime_tts.service.events import AudioFrame
from realtime_tts.service.session import ContextDone, ContextError, SessionEvent, Words

log = logging.getLogger(__name__)

DEFAULT_CONTEXT = "default"  # multi-stream-input messages without context_id, and the whole of stream-input
_PCM_RATES = (8000, 16000, 22050, 24000, 32000, 44100, 48000)
_FORMAT_RE = re.compile(r"(pcm|ulaw|alaw|mp3)_(\d+)(?:_(\d+))?")


def output_format(name: str) -> OutputFormat:
    """ElevenLabs' output_format → ours: pcm_<rate> (s16le), ulaw_8000, alaw_8000, mp3_<rate>_<kbit/s>."""
    m = _FORMAT_RE.fullmatch(name)
    allowed = ", ".join([f"pcm_{r}" for r in _PCM_RATES] + ["ulaw_8000", "alaw_8000", "mp3_22050_32",
                                                             "mp3_44100_128", "mp3_<rate>_<kbps>"])
    if m is None:
        raise BadRequest(f"output_format {name!r} is not one of {allowed}", field="output_format")
    kind, rate, kbps = m.group(1), int(m.group(2)), m.group(3)
    if kind == "mp3":
        if kbps is None:
            raise BadRequest(f"output_format {name!r}: mp3 needs a bit rate (mp3_44100_128)", field="output_format")
        fmt = OutputFormat(container="mp3", sample_rate=rate, bit_rate=int(kbps) * 1000)
    elif kbps is not None or (kind in ("ulaw", "alaw") and rate != 8000):
        raise BadRequest(f"output_format {name!r} is not one of {allowed}", field="output_format")
    else:
        fmt = OutputFormat(container="raw", encoding={"pcm": "pcm_s16le", "ulaw": "pcm_mulaw",
                                                      "alaw": "pcm_alaw"}[kind], sample_rate=rate)
    fmt.check("output_format")
    return fmt


def alignment(text: str, words: list[tuple[int, int, float, float]], start: int, clock_ms: int, *,
              cumulative: bool = False) -> tuple[dict[str, list[Any]], int, int]:
    """Character timings of text[start:last word end] in ElevenLabs' shape, starting at clock_ms (where the
    previous alignment message ended): relative to it (times restart at zero in every message), or with cumulative
    counted from the context's start. words: (text_start, text_end, start_ms, end_ms) from the context's start.
    A word's characters share its span; the characters between words (spaces) span the gap before the next
    word. → (alignment, the text offset it ended at, the new clock in ms)."""
    origin = 0 if cumulative else clock_ms
    chars: list[str] = []
    starts: list[int] = []
    durations: list[int] = []
    at_ms = float(clock_ms)
    pos = start

    def add(span: str, a: float, b: float) -> None:
        n = len(span)
        for k, ch in enumerate(span):
            s, e = round(a + (b - a) * k / n), round(a + (b - a) * (k + 1) / n)
            chars.append(ch)
            starts.append(s - origin)
            durations.append(e - s)

    for w_start, w_end, a_ms, b_ms in words:
        if w_end <= pos:
            continue
        a_ms = max(a_ms, at_ms)
        if w_start > pos:
            add(text[pos:w_start], at_ms, a_ms)  # the spaces before the word fill the pause before it
        add(text[max(w_start, pos):w_end], a_ms, max(a_ms, b_ms))
        pos, at_ms = w_end, max(a_ms, b_ms)
    return {"chars": chars, "charStartTimesMs": starts, "charDurationsMs": durations}, pos, round(at_ms)


class _Context:
    def __init__(self, rate: int):
        self.rate = rate  # engine rate: word sample offsets count at it
        self.text = ""  # everything fed, as the session sees it (word offsets point into it)
        self.aligned_to = 0  # text offset the alignment messages have covered
        self.clock_ms = 0  # where the last alignment message ended
        self.final_flush = False  # the last message was a flush without text: close_context finishes
        self.ended = False


class ElevenLabsSocket(DialectSocket):
    endpoint = "elevenlabs"

    def __init__(self, *args: Any, voice_id: str, query: dict[str, str], multi: bool, **kw: Any):
        super().__init__(*args, **kw)
        self.voice_id = voice_id
        self.query = query
        self.multi = multi
        self.auto_mode = query.get("auto_mode", "false").lower() == "true"
        # The two stock clients read alignment times differently: pipecat adds each message's span to a running
        # clock (times restart at zero per message); LiveKit takes them as counted from the turn's start. LiveKit's
        # URL carries sync_alignment=true, pipecat's does not: each gets times its own reading puts in the right
        # place (tests/test_plugins.py checks both).
        self.cumulative_alignment = query.get("sync_alignment", "false").lower() == "true"
        self.contexts: dict[str, _Context] = {}
        self.format: OutputFormat | None = None

    async def on_open(self) -> None:
        self.format = output_format(self.query.get("output_format", "mp3_44100_128"))  # ElevenLabs' default
        self.params(voice=self.voice_id, voice_field="voice_id")  # an unknown voice refused now, when configured

    def error_message(self, e: TTSError, context_id: str | None) -> dict[str, Any]:
        msg: dict[str, Any] = {"error": e.message, "code": e.code}
        if e.field:
            msg["field"] = e.field
        if context_id is not None and self.multi:
            msg["contextId"] = context_id
        return msg

    def _tag(self, context_id: str, msg: dict[str, Any]) -> dict[str, Any]:
        if self.multi:
            msg["contextId"] = context_id
        return msg

    def context_id_of(self, obj: dict[str, Any]) -> Any:
        return obj.get("context_id", DEFAULT_CONTEXT) if self.multi else DEFAULT_CONTEXT

    def apply(self, context_id: str, obj: dict[str, Any]) -> None:
        if obj.get("close_socket") is True:
            for cid, live in list(self.contexts.items()):
                self._close(cid, live, finish=True)
            self.close_when_done()
            return
        text = obj.get("text")
        if text is not None and not isinstance(text, str):
            raise BadRequest("text must be a string", field="text")
        flush = obj.get("flush") is True or obj.get("try_trigger_generation") is True
        ctx = self.contexts.get(context_id)
        if obj.get("close_context") is True:
            if ctx is None:  # unknown or finished: nothing to stop, but the client waits for its isFinal
                self.reply(self._tag(context_id, {"isFinal": True}))
            else:
                # right after the final flush: the turn's end; anything else (a second close_context, text
                # since the last flush): an interruption
                self._close(context_id, ctx, finish=ctx.final_flush and not ctx.ended)
            return
        if text == "" and not flush:
            if not self.multi and ctx is not None:  # stream-input: an empty text ends the stream
                self._close(context_id, ctx, finish=True)
                self.close_when_done()
            return  # multi-stream-input: a keepalive
        if ctx is None:
            ctx = self._open(context_id, obj)
        self.check_not_cancelled(context_id)
        if text:
            if ctx.ended:
                raise BadRequest(f"context {context_id!r} was closed: no text is taken after close_context",
                                 field="text")
            ctx.text += text
            self.session.text(context_id, text)
        if (flush or (self.auto_mode and text and text.strip())) and not ctx.ended:
            self.session.flush(context_id)
        ctx.final_flush = flush and not text

    def _open(self, context_id: str, obj: dict[str, Any]) -> _Context:
        settings = obj.get("voice_settings") or {}
        if not isinstance(settings, dict):
            raise BadRequest("voice_settings must be an object", field="voice_settings")
        speed = settings.get("speed")
        language = self.query.get("language_code")
        params, warnings = self.params(voice=self.voice_id, voice_field="voice_id", language=language or None,
                                       speed=float(speed) if isinstance(speed, int | float) else None)
        for w in warnings:
            log.info("elevenlabs context %s: %s", context_id, w)
        assert self.format is not None
        self.open_context(context_id, params, self.format, field="output_format")
        ctx = self.contexts[context_id] = _Context(self._engine_rate(params))
        return ctx

    def _close(self, context_id: str, ctx: _Context, *, finish: bool) -> None:
        """Finish the context's audio (isFinal follows it), or interrupt it (isFinal at once)."""
        if not finish:
            self.session.cancel(context_id)
        elif not ctx.ended:
            ctx.ended = True
            self.session.end(context_id)

    async def on_event(self, context_id: str, ev: SessionEvent) -> None:
        ctx = self.contexts.get(context_id)
        if isinstance(ev, AudioFrame):
            data = await self.encode(context_id, ev.pcm)
            if data:
                await self.send_json(self._tag(context_id, {"audio": self.b64(data)}))
        elif isinstance(ev, Words) and ctx is not None and ev.words:
            words = [(w.text_start, w.text_end, w.start_sample * 1000 / ctx.rate, w.end_sample * 1000 / ctx.rate)
                     for w in ev.words]
            align, ctx.aligned_to, ctx.clock_ms = alignment(ctx.text, words, ctx.aligned_to, ctx.clock_ms,
                                                            cumulative=self.cumulative_alignment)
            if align["chars"]:
                await self.send_json(self._tag(context_id, {"alignment": align, "normalizedAlignment": align}))
        elif isinstance(ev, ContextError):
            await self.send_json(self.error_message(ev.error, context_id))
        elif isinstance(ev, ContextDone) and not ev.already_done:
            tail = await self.finish(context_id, cancelled=ev.reason != "end")
            if tail:
                await self.send_json(self._tag(context_id, {"audio": self.b64(tail)}))
            self.contexts.pop(context_id, None)
            await self.send_json(self._tag(context_id, {"isFinal": True}))
