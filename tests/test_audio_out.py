"""audio_out.py: resampling, sample encodings and streamed containers, checked with independent decoders
(libsndfile through soundfile; FFmpeg's decoders through PyAV for ADTS/AAC, which libsndfile does not read,
and for streamed FLAC, whose unknown length (STREAMINFO total 0, valid FLAC) makes libsndfile's reads fail)."""

from __future__ import annotations

import io
import threading
import wave

import numpy as np
import pytest
import soundfile as sf
import soxr
from live_server import decode_audio

from realtime_tts.audio_out import AudioOutput, OutputFormat, Resampler, wav_header
from realtime_tts.errors import BadRequest

SR = 24_000  # the engines' rate
FREQ_HZ = 220.0


def tone(seconds: float, rate: int = SR, amp: float = 0.5) -> np.ndarray:
    return (amp * np.sin(2 * np.pi * FREQ_HZ * np.arange(int(seconds * rate)) / rate)).astype(np.float32)


def chunks(x: np.ndarray, seed: int = 0, max_len: int = 3000) -> list[np.ndarray]:
    """Irregular chunk sizes, like paced engine frames (first one small)."""
    sizes = np.random.default_rng(seed).integers(1, max_len, size=len(x))
    cuts = np.cumsum(sizes)
    return np.split(x, cuts[cuts < len(x)])


def stream(fmt: OutputFormat, parts: list[np.ndarray]) -> list[bytes]:
    out = AudioOutput(fmt, source_rate=SR)
    return [out.push(p) for p in parts] + [out.finish()]


def decode(data: bytes, container: str) -> tuple[np.ndarray, int]:
    """Whole stream → (float mono samples, rate) with a decoder other than the encoder that made it."""
    if container in ("aac", "flac", "mp3"):
        return decode_audio(data)  # FFmpeg's decoders (live_server.decode_audio says why not libsndfile's)
    with sf.SoundFile(io.BytesIO(data)) as f:
        # read in blocks: a streamed FLAC/WAV states no (or the maximal) length, so read() cannot size one array
        blocks = list(f.blocks(blocksize=65536, dtype="float32"))
        return np.concatenate(blocks), f.samplerate


def peak_hz(y: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(y * np.hanning(len(y))))
    return float(np.argmax(spectrum) * rate / len(y))


@pytest.mark.parametrize("container,rate,slack_s", [
    ("mp3", 24000, 0.12), ("mp3", 44100, 0.12), ("mp3", 22050, 0.12), ("mp3", 8000, 0.3),
    ("opus", 48000, 0.0), ("opus", 16000, 0.0), ("aac", 24000, 0.12), ("aac", 48000, 0.12),
    ("flac", 24000, 0.0), ("flac", 37000, 0.0), ("wav", 8000, 0.0), ("wav", 44100, 0.0),
])
def test_containers_decode_to_rate_duration_and_pitch(container: str, rate: int, slack_s: float) -> None:
    x = tone(1.5)
    parts = stream(OutputFormat(container=container, sample_rate=rate), chunks(x))
    y, got_rate = decode(b"".join(parts), container)
    assert got_rate == rate
    duration = len(y) / rate
    # Codecs add encoder delay/padding (mp3 ~1105 samples + a frame, aac 1024 priming); Ogg/Opus trims its
    # pre-skip and end by granule position, and FLAC/WAV are exact.
    assert 1.5 - 1e-3 <= duration <= 1.5 + slack_s + 2e-3, duration
    assert abs(peak_hz(y, rate) - FREQ_HZ) < 2.0  # resampled, not sped up or slowed down
    rms = float(np.sqrt(np.mean(y[len(y) // 4: -len(y) // 4] ** 2)))
    assert rms == pytest.approx(0.5 / np.sqrt(2), rel=0.1)


def test_codec_output_streams_before_finish() -> None:
    """Bytes come out while audio is pushed (not all at finish), for every codec."""
    for container, rate in (("mp3", 24000), ("opus", 24000), ("aac", 24000), ("flac", 24000)):
        parts = stream(OutputFormat(container=container, sample_rate=rate), chunks(tone(2.0)))
        body = sum(len(p) for p in parts[:-1])
        assert body > 0.7 * sum(len(p) for p in parts), container


@pytest.mark.parametrize("encoding,subtype,tol", [
    ("pcm_s16le", "PCM_16", 1e-4), ("pcm_f32le", "FLOAT", 1e-6), ("pcm_mulaw", "ULAW", 0.02),
    ("pcm_alaw", "ALAW", 0.02),
])
@pytest.mark.parametrize("rate", [8000, 16000, 24000, 48000])
def test_raw_encodings_decode_to_the_resampled_signal(encoding: str, subtype: str, tol: float, rate: int) -> None:
    x = tone(1.0)
    fmt = OutputFormat(container="raw", encoding=encoding, sample_rate=rate)
    data = b"".join(stream(fmt, chunks(x)))
    y, _ = sf.read(io.BytesIO(data), format="RAW", subtype=subtype, samplerate=rate, channels=1, dtype="float32")
    ref = soxr.resample(x, SR, rate, quality="HQ")
    assert len(y) == len(ref) == rate
    assert np.abs(y - ref).max() < tol
    # WAV around the same encoding: libsndfile reads the streamed header's format tag
    wav = b"".join(stream(OutputFormat(container="wav", encoding=encoding, sample_rate=rate), chunks(x)))
    with sf.SoundFile(io.BytesIO(wav)) as f:
        assert (f.samplerate, f.subtype) == (rate, subtype)
        assert np.abs(np.concatenate(list(f.blocks(4096, dtype="float32"))) - ref).max() < tol


def test_streamed_wav_plays_with_the_stdlib_reader_and_whole_wav_states_its_length() -> None:
    pcm = (tone(0.25) * 32767).astype("<i2").tobytes()
    streamed = b"".join(stream(OutputFormat(container="wav", sample_rate=SR), [np.frombuffer(pcm, "<i2")]))
    with wave.open(io.BytesIO(streamed)) as w:
        assert w.getframerate() == SR and w.getsampwidth() == 2 and w.getnchannels() == 1
        assert w.readframes(100_000) == pcm
    whole = AudioOutput(OutputFormat(container="wav", sample_rate=16000), source_rate=SR, whole=True)
    assert whole.push(pcm) == b""
    data = whole.finish()
    assert sf.info(io.BytesIO(data)).frames == whole.samples_out == len(pcm) // 2 * 2 // 3


def test_whole_flac_and_mp3_complete_their_headers() -> None:
    x = tone(1.0)
    for container in ("flac", "mp3"):
        out = AudioOutput(OutputFormat(container=container, sample_rate=SR), source_rate=SR, whole=True)
        assert all(out.push(p) == b"" for p in chunks(x))
        info = sf.info(io.BytesIO(out.finish()))  # libsndfile reads a whole FLAC, which it cannot streamed
        assert info.samplerate == SR and abs(info.frames - SR) < 0.1 * SR, (container, info.frames)


def test_engine_rate_s16_passes_bytes_through() -> None:
    pcm = (tone(0.3) * 32767).astype("<i2").tobytes()
    out = AudioOutput(OutputFormat(container="raw", sample_rate=SR), source_rate=SR)
    assert out.push(pcm) == pcm and out.finish() == b""
    wav = AudioOutput(OutputFormat(container="wav", sample_rate=SR), source_rate=SR)
    assert wav.push(pcm) == wav_header(SR) + pcm


@pytest.mark.parametrize("rate", [8000, 22050, 44100, 48000])
def test_no_click_at_chunk_joins(rate: int) -> None:
    """The largest sample step at the joins between pushes is no larger than inside them; resampling each
    chunk on its own (no carried state) is caught by the same measure."""
    parts = chunks(tone(2.0), seed=1, max_len=2400)
    fmt = OutputFormat(container="raw", encoding="pcm_f32le", sample_rate=rate)
    out = stream(fmt, parts)
    y = np.frombuffer(b"".join(out), "<f4")
    joins = np.cumsum([len(b) // 4 for b in out[:-1]])
    joins = joins[(joins > 0) & (joins < len(y))]
    step = np.abs(np.diff(y))  # step[i] = |y[i+1] - y[i]|
    at_joins = step[joins - 1].max()
    inside = np.delete(step, joins - 1)[rate // 10: -rate // 10].max()  # away from the fade-in/out edges
    assert at_joins <= inside * 1.02, (at_joins, inside)

    naive = np.concatenate([soxr.resample(p, SR, rate) for p in parts])
    naive_joins = np.cumsum([len(soxr.resample(p, SR, rate)) for p in parts[:-1]])
    assert np.abs(np.diff(naive))[naive_joins[5:-5] - 1].max() > 1.5 * inside  # the measure sees clicks


@pytest.mark.parametrize("container,encoding", [("raw", "pcm_f32le"), ("raw", "pcm_mulaw"), ("mp3", ""),
                                                ("opus", ""), ("aac", ""), ("flac", "")])
def test_many_small_pushes_equal_one_big_push(container: str, encoding: str) -> None:
    x = tone(1.0)
    fmt = OutputFormat(container=container, encoding=encoding or "pcm_s16le", sample_rate=16000)
    small = b"".join(stream(fmt, chunks(x, seed=2, max_len=200)))
    big = b"".join(stream(fmt, [x]))
    if container == "raw":
        subtype = "FLOAT" if encoding == "pcm_f32le" else "ULAW"
        ys, yb = (sf.read(io.BytesIO(d), format="RAW", subtype=subtype, samplerate=16000, channels=1)[0]
                  for d in (small, big))
    else:
        ys, yb = decode(small, container)[0], decode(big, container)[0]
    assert len(ys) == len(yb)
    assert np.abs(ys - yb).max() < (1e-5 if encoding == "pcm_f32le" else 0.01)


def test_resampler_identity_and_tail() -> None:
    x = tone(0.5)
    same = Resampler(SR, SR)
    assert same.push(x) is x and len(same.finish()) == 0
    r = Resampler(SR, 8000)
    total = sum(len(r.push(p)) for p in chunks(x)) + len(r.finish())
    assert total == len(x) // 3


@pytest.mark.parametrize("container", ["mp3", "opus", "aac", "flac"])
def test_close_frees_an_encoder_at_any_point(container: str) -> None:
    fmt = OutputFormat(container=container, sample_rate=SR)
    for whole in (False, True):
        fresh = AudioOutput(fmt, source_rate=SR, whole=whole)
        fresh.close()
        assert fresh.finish() == b""  # closed: no tail afterwards
        used = AudioOutput(fmt, source_rate=SR, whole=whole)
        used.push(tone(0.3))
        used.close()
        used.close()


def test_empty_streams_are_valid() -> None:
    assert AudioOutput(OutputFormat(container="wav", sample_rate=16000), source_rate=SR).finish() == \
        wav_header(16000)
    data = AudioOutput(OutputFormat(container="flac", sample_rate=16000), source_rate=SR).finish()
    assert data.startswith(b"fLaC")


@pytest.mark.parametrize("fmt,field,words", [
    (OutputFormat(container="mp3", sample_rate=37000), "sample_rate", "44100"),
    (OutputFormat(container="opus", sample_rate=44100), "sample_rate", "48000"),
    (OutputFormat(container="raw", sample_rate=7999), "sample_rate", "8000..48000"),
    (OutputFormat(container="raw", sample_rate=96000), "sample_rate", "8000..48000"),
    (OutputFormat(container="raw", encoding="pcm_u8", sample_rate=8000), "encoding", "pcm_mulaw"),
    (OutputFormat(container="ogg", sample_rate=8000), "response_format", "flac"),
])
def test_unproducible_formats_are_refused(fmt: OutputFormat, field: str, words: str) -> None:
    with pytest.raises(BadRequest) as e:
        AudioOutput(fmt, source_rate=SR)
    assert e.value.field == field and words in str(e.value)


def test_content_types() -> None:
    types = {name: OutputFormat.from_response_format(name, 24000).content_type
             for name in ("mp3", "opus", "aac", "flac", "wav", "pcm")}
    assert types == {"mp3": "audio/mpeg", "opus": "audio/ogg; codecs=opus", "aac": "audio/aac",
                     "flac": "audio/flac", "wav": "audio/wav", "pcm": "audio/pcm"}
    with pytest.raises(BadRequest):
        OutputFormat.from_response_format("m4a", 24000)


@pytest.mark.parametrize("container", ["mp3", "opus", "aac"])
def test_close_while_a_push_runs_on_another_thread(container: str) -> None:
    """The HTTP and dialect streams push on a worker thread while the event loop may close() (the client left).
    Closing FFmpeg state under a running encode segfaulted the server (LiveKit's OpenAI plugin dropping an mp3
    SSE stream); close() now waits for the push, and later pushes return nothing."""
    chunk = (np.sin(np.arange(2880) * 0.05) * 8000).astype(np.int16).tobytes()  # 120 ms at 24 kHz
    for _ in range(30):
        out = AudioOutput(OutputFormat(container=container, sample_rate=24000), source_rate=24000)
        started = threading.Event()
        errors: list[BaseException] = []

        def pusher(out: AudioOutput = out, started: threading.Event = started,
                   errors: list[BaseException] = errors) -> None:
            try:
                for _ in range(200):
                    started.set()
                    out.push(chunk)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        thread = threading.Thread(target=pusher)
        thread.start()
        started.wait()
        out.close()
        thread.join()
        assert not errors
        assert out.push(chunk) == b"" and out.finish() == b""
