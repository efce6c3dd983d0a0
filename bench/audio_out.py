"""Benchmark of the wire-audio stage (realtime_tts/audio_out.py) on real CPU-voice audio: CPU time per second
of audio, the largest single push, how much audio must go in before the first byte comes out, and bytes per
second of audio, for each output format at the rates clients ask for. Prints a table, writes
bench/results/audio_out.md (keeps the history table of earlier runs).

    .venv/bin/python bench/audio_out.py [--seconds 20]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import numpy as np
from machine import cpu_model, history_rows  # bench/machine.py (the script's own folder is on sys.path)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from realtime_tts.audio_out import AudioOutput, OutputFormat

SOURCE_RATE = 24_000
FRAME_MS = 120  # the server's steady frame size (config.pacing.frame_ms)
TEXT = ("The old lighthouse stood at the edge of the cliff, its white paint peeling after decades of storms. "
        "Every evening the keeper climbed the spiral stairs, trimmed the wick, and watched the beam sweep across "
        "the water.")
CASES = [
    ("raw", "pcm_s16le", 24000), ("raw", "pcm_s16le", 16000), ("raw", "pcm_s16le", 44100),
    ("raw", "pcm_mulaw", 8000), ("raw", "pcm_alaw", 8000), ("raw", "pcm_f32le", 48000),
    ("wav", "pcm_s16le", 24000), ("mp3", "", 24000), ("mp3", "", 22050), ("mp3", "", 44100),
    ("opus", "", 24000), ("opus", "", 48000), ("aac", "", 24000), ("flac", "", 24000),
]


def speech(seconds: float) -> np.ndarray:
    from hibari import Hibari

    voice = Hibari(threads=1)
    parts: list[np.ndarray] = []
    while sum(len(p) for p in parts) < seconds * SOURCE_RATE:
        parts.append(voice(TEXT, seed=len(parts)))
    return np.concatenate(parts)[: int(seconds * SOURCE_RATE)].astype(np.float32)


def run(container: str, encoding: str, rate: int, audio: np.ndarray) -> dict[str, float]:
    pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()  # what the service hands the api layer
    frame = SOURCE_RATE * FRAME_MS // 1000 * 2
    out = AudioOutput(OutputFormat(container=container, encoding=encoding or "pcm_s16le", sample_rate=rate),
                      source_rate=SOURCE_RATE)
    push_s: list[float] = []
    total = 0
    first_at_ms = None
    for i in range(0, len(pcm), frame):
        t = time.process_time()
        data = out.push(pcm[i: i + frame])
        push_s.append(time.process_time() - t)
        total += len(data)
        if data and first_at_ms is None:
            first_at_ms = (i + frame) / 2 / SOURCE_RATE * 1e3
    t = time.process_time()
    total += len(out.finish())
    finish_s = time.process_time() - t
    seconds = len(audio) / SOURCE_RATE
    return {"cpu_ms_per_s": (sum(push_s) + finish_s) / seconds * 1e3, "max_push_ms": max(push_s) * 1e3,
            "first_byte_after_ms": first_at_ms or float("nan"), "kbit_per_s": total * 8 / seconds / 1e3}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    audio = speech(args.seconds)
    header = ("| container | encoding | rate (Hz) | CPU ms per s of audio | largest push (ms) | first byte after "
              f"(ms of audio, {FRAME_MS} ms pushes) | kbit/s |")
    rows = [header, "|---|---|---|---|---|---|---|"]
    for container, encoding, rate in CASES:
        r = min((run(container, encoding, rate, audio) for _ in range(3)), key=lambda x: x["cpu_ms_per_s"])
        rows.append(f"| {container} | {encoding or '-'} | {rate} | {r['cpu_ms_per_s']:.2f} | {r['max_push_ms']:.2f} "
                    f"| {r['first_byte_after_ms']:.0f} | {r['kbit_per_s']:.1f} |")
    table = "\n".join(rows)
    print(table)

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, check=False,
                            text=True).stdout.strip()
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    versions = ", ".join(f"{p} {metadata.version(p)}" for p in ("av", "soxr", "numpy", "hibari-tts"))
    mp3 = next(r for r in rows[2:] if r.startswith("| mp3 | - | 24000"))
    out = REPO / "bench" / "results" / "audio_out.md"
    history = [*history_rows(out), f"| {when} | {commit} | {mp3.split('|')[4].strip()} |"]
    out.write_text(
        "# Wire audio stage (audio_out.py) on CPU-voice audio\n\n"
        f"- command: `python bench/audio_out.py --seconds {args.seconds:g}`\n"
        f"- date: {when}\n"
        f"- machine: {platform.system()} {platform.machine()}, {cpu_model()}\n"
        f"- versions: python {platform.python_version()}, {versions}, realtime_tts {commit}\n"
        f"- load average at the end (1/5/15 min): {' / '.join(f'{x:.2f}' for x in os.getloadavg())} (other work "
        "on the same cores inflates CPU times)\n\n"
        f"{args.seconds:g} s of hibari-tts speech (24 kHz) pushed as int16 frames of {FRAME_MS} ms, as the service "
        "hands them to the api layer; CPU time is process time of push() + finish(), best of 3 runs. \"First byte "
        "after\" is how much audio had been pushed when the first wire byte came out (encoder lookahead, Ogg page "
        "and resampler delay; for Ogg/Opus that first byte is the Ogg header page, audio pages follow each 100 ms)."
        "\n\n"
        f"{table}\n\n## History\n\n| date | commit | mp3 24 kHz CPU ms per s of audio |\n|---|---|---|\n"
        + "\n".join(history) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
