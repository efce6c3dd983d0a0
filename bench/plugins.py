"""The 8 stock voice-agent TTS plugins (pipecat / LiveKit Agents x Cartesia, ElevenLabs, Deepgram, OpenAI) against
a local server with the CPU voice: audio seconds, first-audio ms, what an interruption did, word timings.

Each plugin runs tests/plugins/drive.py (three turns: short answer, long answer interrupted ~1 s into its audio,
next short answer) in the plugin venv, one at a time, so the first-audio times are not shared with the other
plugins. Writes bench/results/plugins.md (keeps the history table of earlier runs).

    python bench/plugins.py [--plugin-python .venv-plugins/bin/python]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests" / "plugins"))  # drive.py: the texts the plugins speak (stdlib imports only)

from drive import SHORT, run_in
from live_server import Server, start_server, stop_server
from machine import cpu_model, git_commit, history_rows

FRAMEWORKS = ("pipecat", "livekit")
PLUGINS = ("cartesia", "elevenlabs", "deepgram", "openai")
URL_ARG = {
    ("pipecat", "cartesia"): 'url="ws://HOST/tts/websocket"', ("livekit", "cartesia"): 'base_url="http://HOST"',
    ("pipecat", "elevenlabs"): 'url="ws://HOST"', ("livekit", "elevenlabs"): 'base_url="http://HOST/v1"',
    ("pipecat", "deepgram"): 'base_url="ws://HOST"', ("livekit", "deepgram"): 'base_url="http://HOST/v1/speak"',
    ("pipecat", "openai"): 'base_url="http://HOST/v1"', ("livekit", "openai"): 'base_url="http://HOST/v1"',
}


def requests_by_status(server_http: str) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for m in re.finditer(r'^realtime_tts_requests_total\{endpoint="(\w+)",status="(\w+)"[^}]*\} ([\d.]+)$',
                         httpx.get(server_http + "/metrics").text, re.MULTILINE):
        out[(m.group(1), m.group(2))] = out.get((m.group(1), m.group(2)), 0.0) + float(m.group(3))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plugin-python", default=str(REPO / ".venv-plugins" / "bin" / "python"))
    args = ap.parse_args()
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    server: Server = start_server(tmp)
    rows = [("| framework | plugin | URL argument | audio s (short; HTTP same text) | first audio ms (short, next) "
            "| interruption: audio after / made of ~400 s / server | word timings (short) |"),
            "|---|---|---|---|---|---|---|"]
    try:
        ref = httpx.post(server.http + "/v1/audio/speech", timeout=60,
                         json={"input": SHORT, "voice": "alloy", "response_format": "pcm"})
        ref_s = len(ref.content) / 2 / 24000
        for framework in FRAMEWORKS:
            for plugin in PLUGINS:
                before = requests_by_status(server.http)
                turns = run_in(args.plugin_python, framework, plugin, server.http)
                after = requests_by_status(server.http)
                endpoint = "speech" if plugin == "openai" else plugin
                delta = {status: n - before.get((ep, status), 0) for (ep, status), n in after.items()
                         if ep == endpoint and n - before.get((ep, status), 0)}
                short, long, nxt = turns
                server_said = ", ".join(f"{n:g} {status}" for status, n in sorted(delta.items()))
                timing = f"{short['timed_words']} of {len(SHORT.split())} words" if short["timed_words"] else \
                    "none (not asked)"
                rows.append(
                    f"| {framework} | {plugin} | `{URL_ARG[(framework, plugin)]}` | {short['audio_s']:.2f} at "
                    f"{'/'.join(map(str, short['sample_rates']))} Hz; {ref_s:.2f} | {short['first_audio_ms']:.0f}, "
                    f"{nxt['first_audio_ms']:.0f} | {long['audio_s_after_interrupt']:.1f} s / {long['audio_s']:.1f} s "
                    f"/ {server_said} | {timing} |")
                print(rows[-1], flush=True)
    finally:
        stop_server(server)
    table = "\n".join(rows)
    commit = git_commit(REPO)
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    plugin_versions = subprocess.run(
        [args.plugin_python, "-c", ("from importlib import metadata as m; print(', '.join(f'{p} ' + m.version(p) "
         "for p in ('pipecat-ai', 'livekit-agents', 'livekit-plugins-cartesia', 'livekit-plugins-elevenlabs', "
         "'livekit-plugins-deepgram', 'livekit-plugins-openai')))")],
        capture_output=True, text=True, check=False).stdout.strip()
    versions = ", ".join(f"{p} {metadata.version(p)}" for p in ("hibari-tts", "starlette", "uvicorn"))
    first_ms = [float(r.split("|")[5].split(",")[0]) for r in rows[2:]]
    out = REPO / "bench" / "results" / "plugins.md"
    history = [*history_rows(out), f"| {when} | {commit} | {min(first_ms):.0f} | {max(first_ms):.0f} |"]
    out.write_text(
        "# Stock voice-agent TTS plugins against realtime_tts (CPU voice)\n\n"
        "- command: `python bench/plugins.py`\n"
        f"- date: {when}\n"
        f"- machine: {platform.system()} {platform.machine()}, {cpu_model()}, {os.cpu_count()} cores\n"
        f"- versions: python {platform.python_version()}, {versions}, realtime_tts {commit}; plugins: "
        f"{plugin_versions}\n"
        f"- load average at the end (1/5/15 min): {' / '.join(f'{x:.2f}' for x in os.getloadavg())} (a shared "
        "machine: other work inflates the times)\n\n"
        "Each plugin, unchanged but for its URL argument (HOST = 127.0.0.1:PORT), speaks three turns as an agent "
        "would (tests/plugins/drive.py): a short answer, a long one (100 sentences, ~400 s) interrupted about 1 s "
        "into its audio the plugin's own way (pipecat: InterruptionFrame -> Cartesia cancel / ElevenLabs "
        "close_context / Deepgram Clear; LiveKit: the stream is closed, and the next turn replaces the pooled "
        "socket), and the next short answer. First audio: from the turn's first text to its first audio frame in "
        "the plugin. \"audio after\": audio the plugin got more than 0.2 s after the interruption; \"made\": "
        "audio of the long answer that reached the plugin; \"server\": the endpoint's requests by status in this "
        "run (the long answer cancelled or disconnected = its engine work stopped there). pipecat's OpenAI plugin "
        "makes one HTTP request per sentence and stops making them at the interruption; LiveKit's reads one "
        "mp3 SSE response for the whole answer and leaves it (a request whose HTTP client left is not counted "
        "in requests_total on this branch: the reliability work records those).\n\n"
        f"{table}\n\n## History\n\n| date | commit | fastest first audio ms | slowest first audio ms |\n"
        "|---|---|---|---|\n" + "\n".join(history) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
