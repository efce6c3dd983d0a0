"""Wire audio for every entry point: engine PCM chunks → resampled (soxr), sample-encoded (s16le, f32le,
G.711 mu-law / a-law) and, for containers, streamed through FFmpeg encoders (PyAV: mp3, ogg/opus, adts/aac,
flac) or a streamed WAV header. Runs in the web process: numpy, soxr, av (and audio.py); never torch.
"""

from __future__ import annotations

import io
import struct
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import soxr

from realtime_tts.audio import from_pcm16, to_int16
from realtime_tts.errors import BadRequest

MIN_SAMPLE_RATE_HZ = 8000
MAX_SAMPLE_RATE_HZ = 48000
# Sample encodings of raw and WAV output (Cartesia/Deepgram/session names).
ENCODINGS = ("pcm_s16le", "pcm_f32le", "pcm_mulaw", "pcm_alaw")
# Containers: "raw" is bare samples in `encoding`; the rest are self-describing streams.
CONTAINERS = ("raw", "wav", "mp3", "opus", "aac", "flac")
# POST /v1/audio/speech response_format names (OpenAI's six; "ogg" is kept for older clients: Ogg/Opus).
RESPONSE_FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm", "ogg")
_RESPONSE_CONTAINERS = {"pcm": "raw", "ogg": "opus"}

_BYTES_PER_SAMPLE = {"pcm_s16le": 2, "pcm_f32le": 4, "pcm_mulaw": 1, "pcm_alaw": 1}
_RAW_TYPES = {
    "pcm_s16le": "audio/pcm",  # what OpenAI answers for response_format pcm (LiveKit decodes by this)
    "pcm_f32le": "audio/pcm; encoding=float",
    "pcm_mulaw": "audio/basic",  # RFC 2046: 8-bit mu-law
    "pcm_alaw": "audio/x-alaw-basic",
}
# WAVE format tags: PCM, IEEE float, A-law, mu-law.
_WAV_TAGS = {"pcm_s16le": 1, "pcm_f32le": 3, "pcm_alaw": 6, "pcm_mulaw": 7}


def _av() -> Any:
    """PyAV, imported on first use: only the encoded formats (mp3/opus/aac/flac containers, G.711) need it, so
    a server that sends raw PCM starts without the library (the GPU device carries no PyAV wheel)."""
    import av

    return av


@dataclass(frozen=True, slots=True)
class _Codec:
    muxer: str  # FFmpeg muxer name
    codec: str  # FFmpeg encoder name
    sample_format: str  # a sample format the encoder takes
    content_type: str
    rates: tuple[int, ...] | None  # the only rates the encoder runs at; None = any
    options: dict[str, str]  # muxer options


# flush_packets: every muxed packet leaves at once (no 32 KiB AVIO buffering), so push() returns what
# is encoded now. mp3 without an ID3 tag starts with a frame sync, as OpenAI's mp3 stream does.
# Ogg pages close every 100 ms of audio: lower first-byte latency than the 1 s default at ~8 % overhead.
_CODECS = {
    "mp3": _Codec("mp3", "libmp3lame", "fltp", "audio/mpeg",
                  (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000),
                  {"flush_packets": "1", "id3v2_version": "0"}),
    "opus": _Codec("ogg", "libopus", "flt", "audio/ogg; codecs=opus", (8000, 12000, 16000, 24000, 48000),
                   {"flush_packets": "1", "page_duration": "100000"}),
    "aac": _Codec("adts", "aac", "fltp", "audio/aac",
                  (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000), {"flush_packets": "1"}),
    "flac": _Codec("flac", "flac", "s16", "audio/flac", None, {"flush_packets": "1"}),
}
# Bit rates for speech, by codec; an OutputFormat may name its own (ElevenLabs mp3_22050_32).
_DEFAULT_BIT_RATES = {"mp3": 64_000, "opus": 32_000, "aac": 64_000}


@dataclass(frozen=True, slots=True)
class OutputFormat:
    """What a client asked to receive. container "raw" and "wav" use `encoding`; the codecs ignore it."""

    container: str = "raw"
    encoding: str = "pcm_s16le"
    sample_rate: int = 24000
    bit_rate: int | None = None  # codecs only; None = a speech default

    @classmethod
    def from_response_format(cls, name: str, sample_rate: int) -> OutputFormat:
        """An HTTP response_format name (RESPONSE_FORMATS) → format; raises BadRequest for unknown names."""
        if name not in RESPONSE_FORMATS:
            raise BadRequest(f"response_format must be one of {', '.join(RESPONSE_FORMATS)}; got {name!r}",
                             field="response_format")
        return cls(container=_RESPONSE_CONTAINERS.get(name, name), sample_rate=sample_rate)

    @property
    def content_type(self) -> str:
        if self.container == "raw":
            return _RAW_TYPES[self.encoding]
        if self.container == "wav":
            return "audio/wav"
        return _CODECS[self.container].content_type

    def check(self, field: str = "sample_rate") -> None:
        """Raise BadRequest (naming `field` for rate problems) unless this format can be produced."""
        if self.container not in CONTAINERS:
            raise BadRequest(f"container must be one of {', '.join(CONTAINERS)}; got {self.container!r}",
                             field="response_format")
        if self.encoding not in ENCODINGS:
            raise BadRequest(f"encoding must be one of {', '.join(ENCODINGS)}; got {self.encoding!r}",
                             field="encoding")
        if not MIN_SAMPLE_RATE_HZ <= self.sample_rate <= MAX_SAMPLE_RATE_HZ:
            raise BadRequest(f"{field} must be {MIN_SAMPLE_RATE_HZ}..{MAX_SAMPLE_RATE_HZ} Hz; got "
                             f"{self.sample_rate}", field=field)
        codec = _CODECS.get(self.container)
        if codec is not None and codec.rates is not None and self.sample_rate not in codec.rates:
            raise BadRequest(f"{self.container} is encoded only at {', '.join(map(str, codec.rates))} Hz; "
                             f"{field} {self.sample_rate} is not one of them", field=field)


class Resampler:
    """Streaming sample-rate conversion (soxr, HQ): filter state carries across pushes, so chunk joins are
    seamless and the output does not depend on how the input was chunked. Output lags input by the filter
    delay (a few ms); finish() returns the rest."""

    def __init__(self, in_rate: int, out_rate: int):
        self.in_rate, self.out_rate = in_rate, out_rate
        self._stream = None if in_rate == out_rate else soxr.ResampleStream(
            in_rate, out_rate, 1, dtype="float32", quality="HQ")

    def push(self, samples: np.ndarray) -> np.ndarray:
        """float32 [num_samples] at in_rate → float32 [~num_samples * out/in] at out_rate."""
        if self._stream is None:
            return samples
        out: np.ndarray = self._stream.resample_chunk(samples, last=False)
        return out

    def finish(self) -> np.ndarray:
        if self._stream is None:
            return np.zeros(0, np.float32)
        out: np.ndarray = self._stream.resample_chunk(np.zeros(0, np.float32), last=True)
        return out


class _G711:
    """mu-law / a-law through FFmpeg's pcm_mulaw / pcm_alaw encoders (stdlib audioop is deprecated in 3.11
    and gone in 3.13). Stateless per sample, so each push encodes on its own."""

    def __init__(self, encoding: str, sample_rate: int):
        self._ctx: Any = _av().CodecContext.create(encoding, "w")
        self._ctx.sample_rate = sample_rate
        self._ctx.layout = "mono"
        self._ctx.format = "s16"
        self._ctx.open()
        self._rate = sample_rate

    def encode(self, pcm16: np.ndarray) -> bytes:
        if not len(pcm16):
            return b""
        frame = _av().AudioFrame.from_ndarray(pcm16.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = self._rate
        return b"".join(bytes(p) for p in self._ctx.encode(frame))


def wav_header(sample_rate: int, encoding: str = "pcm_s16le", num_samples: int | None = None) -> bytes:
    """A mono WAV header for `encoding`. num_samples None → the largest sizes a RIFF header can state, the
    usual convention for a WAV streamed before its length is known (players read until the stream ends)."""
    width = _BYTES_PER_SAMPLE[encoding]
    data_bytes = 0xFFFFFFFF - 44 if num_samples is None else num_samples * width
    # fmt chunk of 18 bytes (cbSize 0): required for the non-PCM tags, accepted for PCM too.
    fmt = struct.pack("<HHIIHHH", _WAV_TAGS[encoding], 1, sample_rate, sample_rate * width, width, 8 * width, 0)
    riff_size = min(0xFFFFFFFF, 4 + 8 + len(fmt) + 8 + data_bytes)
    return (b"RIFF" + struct.pack("<I", riff_size) + b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
            + b"data" + struct.pack("<I", data_bytes))


class _Sink:
    """The file object PyAV muxes into: collects what the muxer writes until the caller takes it. Having no
    seek() makes the output non-seekable to FFmpeg, so no muxer waits to patch a header at the end."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def write(self, data: bytes) -> int:
        self._buf += data
        return len(data)

    def take(self) -> bytes:
        data = bytes(self._buf)
        self._buf.clear()
        return data


class _Encoder:
    """One streaming codec + muxer (PyAV). PyAV re-chunks pushed frames to the encoder's frame size.
    seekable: mux into memory that FFmpeg may seek in, so the muxer completes its header at the end (FLAC
    STREAMINFO length, the mp3 Xing frame); everything then comes out of finish()."""

    def __init__(self, codec: _Codec, sample_rate: int, bit_rate: int | None, *, seekable: bool):
        self._codec = codec
        self._rate = sample_rate
        self._sink = _Sink()
        self._file: io.BytesIO | None = io.BytesIO() if seekable else None
        self._container: Any = _av().open(self._file or self._sink, "w", format=codec.muxer,
                                       container_options=codec.options)
        self._stream: Any = self._container.add_stream(codec.codec, rate=sample_rate, layout="mono")
        ctx = self._stream.codec_context
        ctx.format = codec.sample_format
        if bit_rate is not None:
            ctx.bit_rate = bit_rate
        self._pts = 0

    def push(self, samples: np.ndarray) -> bytes:
        if len(samples):
            if self._codec.sample_format == "s16":
                frame = _av().AudioFrame.from_ndarray(to_int16(samples).reshape(1, -1), format="s16", layout="mono")
            else:
                frame = _av().AudioFrame.from_ndarray(np.ascontiguousarray(samples, np.float32).reshape(1, -1),
                                                   format=self._codec.sample_format, layout="mono")
            frame.sample_rate = self._rate
            frame.pts = self._pts
            self._pts += len(samples)
            for packet in self._stream.encode(frame):
                self._container.mux(packet)
        return self._sink.take()

    def finish(self) -> bytes:
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        self._container.close()
        return self._file.getvalue() if self._file is not None else self._sink.take()

    def close(self) -> None:
        """Free the FFmpeg state without flushing (a cancelled or failed stream)."""
        self._container.close()


class AudioOutput:
    """Engine PCM chunks of one stream → wire bytes in `fmt`. Build one per response / context, push each
    engine chunk in order, then finish() once for the tail (resampler delay, encoder lookahead, container
    trailer). Raises BadRequest at construction for a format it cannot produce.

    push() takes int16 little-endian bytes (service.AudioFrame.pcm) or a numpy array (float32 in [-1, 1], or
    int16) at `source_rate`. Codec encoding is CPU work: 11-21 ms of CPU per second of mp3/opus/aac audio, up
    to ~5 ms (aac's first: ~20 ms) for one 120 ms push (bench/audio_out.py); raw encodings well under 1 ms.

    whole=True is for a buffered body: push() returns nothing and finish() the complete file, with the
    lengths a streamed header cannot know (WAV sizes, FLAC total samples, the mp3 Xing frame).
    """

    def __init__(self, fmt: OutputFormat, *, source_rate: int, field: str = "sample_rate", whole: bool = False):
        fmt.check(field)
        self.format = fmt
        self.sample_rate = fmt.sample_rate
        self.content_type = fmt.content_type
        self.encodes = fmt.container in _CODECS  # True: push() runs a codec (callers may move it off the loop)
        self._whole = whole
        self._held = bytearray()  # whole: the body so far
        self._resampler = Resampler(source_rate, fmt.sample_rate)
        self._passthrough = source_rate == fmt.sample_rate and fmt.encoding == "pcm_s16le" \
            and fmt.container in ("raw", "wav")
        self._header = wav_header(fmt.sample_rate, fmt.encoding) if fmt.container == "wav" and not whole else b""
        self._g711 = _G711(fmt.encoding, fmt.sample_rate) \
            if fmt.container in ("raw", "wav") and fmt.encoding in ("pcm_mulaw", "pcm_alaw") else None
        codec = _CODECS.get(fmt.container)
        self._encoder = None if codec is None else _Encoder(
            codec, fmt.sample_rate, fmt.bit_rate or _DEFAULT_BIT_RATES.get(fmt.container), seekable=whole)
        self._finished = False
        self.samples_out = 0  # at the output rate
        # push/finish run on a worker thread (asyncio.to_thread) while close() may come from the event loop (the
        # client left): closing FFmpeg state under a running encode crashed the process (segfault in
        # libavformat, seen when LiveKit's OpenAI plugin dropped an mp3 SSE stream). One at a time.
        self._lock = threading.Lock()

    def push(self, pcm: bytes | np.ndarray) -> bytes:
        """Wire bytes for the next engine chunk; b"" once the stream is finished or closed."""
        with self._lock:
            if self._finished:
                return b""
            if self._passthrough and isinstance(pcm, bytes):
                self.samples_out += len(pcm) // 2
                return self._hold(self._take_header() + pcm)
            return self._hold(self._emit(self._resampler.push(_as_float(pcm))))

    def finish(self) -> bytes:
        """The tail of the stream (whole: the complete file); call once. A stream with no audio is still
        valid (WAV header, empty container)."""
        with self._lock:
            return self._finish()

    def _finish(self) -> bytes:
        if self._finished:
            return b""
        self._finished = True
        out = self._hold(self._emit(self._resampler.finish()))
        if self._encoder is not None:
            out += self._encoder.finish()
        if self._whole:
            header = wav_header(self.sample_rate, self.format.encoding, self.samples_out) \
                if self.format.container == "wav" else b""
            out = header + bytes(self._held) + out
            self._held.clear()
        return out

    def _hold(self, data: bytes) -> bytes:
        if not self._whole:
            return data
        self._held += data
        return b""

    def close(self) -> None:
        """Drop the stream without its tail (cancel, client gone): frees the encoder. Waits for a push or finish
        running on another thread (a few ms at most); later pushes return nothing."""
        with self._lock:
            if not self._finished:
                self._finished = True
                if self._encoder is not None:
                    self._encoder.close()

    def _take_header(self) -> bytes:
        header, self._header = self._header, b""
        return header

    def _emit(self, samples: np.ndarray) -> bytes:
        self.samples_out += len(samples)
        if self._encoder is not None:
            return self._encoder.push(samples)
        enc = self.format.encoding
        if enc == "pcm_f32le":
            body: bytes = np.clip(samples, -1.0, 1.0).astype("<f4").tobytes()
        elif self._g711 is not None:
            body = self._g711.encode(to_int16(samples))
        else:
            body = to_int16(samples).tobytes()
        return self._take_header() + body


def _as_float(pcm: bytes | np.ndarray) -> np.ndarray:
    # the scale of audio.to_int16 / from_pcm16 (x 32767), so s16 output at the engine rate is bit-exact
    if isinstance(pcm, bytes):
        return from_pcm16(pcm)
    if pcm.dtype == np.int16:
        return pcm.astype(np.float32) / 32767.0
    return np.ascontiguousarray(pcm, dtype=np.float32)
