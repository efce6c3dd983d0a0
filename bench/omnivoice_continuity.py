"""What one voice per conversation costs on the OmniVoice engine (issue 13 item 4): the same workloads with
--voice-continuity on and off, through the real server.

- agents: N voice agents streaming 3-sentence replies word by word into WS /v1/stream/text and playing the
  audio in real time (bench/omnivoice_serve.py's agents) → first audio p50/p95 and underruns. With
  continuity the reply's later sentences wait in the worker for the first sentence's codes.
- bulk: K long texts (about 12 sentences each) at once on POST /v1/audio/speech (chunk_mode concurrent, one
  buffered body each) → xRT (seconds of audio per wall second, all requests together) and p50 latency.
  With continuity every chunk after the first is conditioned on it: longer prompts, one wait per text.

Starts `realtime-tts serve` twice (on, then off), prints a table, writes OUT/<name>.md (command, machine,
versions, commit, date) and keeps earlier runs' rows in its history table.

    .venv/bin/python bench/omnivoice_continuity.py --build tiny --agents 1,4 --bulk 4 --num-step 8   # CPU smoke
    python bench/omnivoice_continuity.py --build full --word-tokenizer --agents 1,25,100 --bulk 64
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import git_commit, history_rows  # the bench directory is not a package
from omnivoice_serve import (  # the bench directory is not a package
    REPO,
    SR,
    device_name,
    free_port,
    pct,
    run_agents,
    start_server,
    versions,
)

LONG_TEXT = (
    "The river starts high in the mountains, where the snow melts every spring. "
    "It runs through narrow valleys and past small villages built of stone. "
    "In the summer, children swim in its cold pools and fishermen wait on the banks. "
    "Further down, the valley opens and the water slows between wide green fields. "
    "Farmers have used it for their crops for more than a thousand years. "
    "A long wooden bridge crosses it near the old mill, which still turns today. "
    "Then the river reaches the city, where it passes under twelve bridges. "
    "Boats carry tourists along the quays from morning until late at night. "
    "After the city, it joins a larger river that flows toward the coast. "
    "Near the sea, the water becomes brackish and birds gather on the mud flats. "
    "At the estuary, ships wait for the tide before they sail into the harbour. "
    "And finally, after three hundred kilometres, the river meets the open sea."
)


async def run_bulk(url: str, num: int, params: dict[str, Any]) -> dict[str, Any]:
    """num long texts at once, each one buffered PCM body: xRT over all of them, p50/p95 latency."""
    async with httpx.AsyncClient(timeout=1800) as client:
        async def one(i: int) -> tuple[float, float, str | None]:
            t0 = time.perf_counter()
            r = await client.post(url + "/v1/audio/speech", json={
                "input": LONG_TEXT, "response_format": "pcm", "stream": False, "seed": i,
                "chunk_mode": "concurrent", **params})
            if r.status_code != 200:
                return time.perf_counter() - t0, 0.0, f"{r.status_code}: {r.text[:120]}"
            return time.perf_counter() - t0, len(r.content) / 2 / SR, None

        t0 = time.perf_counter()
        results = await asyncio.gather(*(one(i) for i in range(num)))
        wall = time.perf_counter() - t0
    latencies = [r[0] for r in results if r[2] is None]
    audio_s = sum(r[1] for r in results)
    return {"texts": num, "ok": len(latencies), "audio_s": audio_s, "wall_s": wall,
            "xrt": audio_s / wall if wall > 0 else float("nan"), "p50_s": pct(latencies, 50),
            "p95_s": pct(latencies, 95), "errors": [r[2] for r in results if r[2]][:3]}


def measure(ckpt: str, continuity: bool, args: argparse.Namespace) -> dict[str, Any]:
    os.environ["REALTIME_TTS_VOICE_CONTINUITY"] = "1" if continuity else "0"
    port = free_port()
    proc = start_server(ckpt, port, args.server_args.split())
    url, ws_url = f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}"
    params = {"num_step": args.num_step}
    out: dict[str, Any] = {"continuity": continuity, "agents": [], "bulk": None}
    try:
        asyncio.run(run_agents(ws_url, 1, args.words_per_s, params))  # warm-up: first-use costs
        for n in [int(x) for x in args.agents.split(",") if x]:
            row = asyncio.run(run_agents(ws_url, n, args.words_per_s, params))
            out["agents"].append(row)
            print("continuity", continuity, "agents", n, {k: row[k] for k in (
                "ok", "p50_first_audio_ms", "p95_first_audio_ms", "underruns")}, flush=True)
        if args.bulk:
            out["bulk"] = asyncio.run(run_bulk(url, args.bulk, params))
            print("continuity", continuity, "bulk", out["bulk"], flush=True)
    finally:
        proc.terminate()
        proc.wait(60)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt", help="OmniVoice checkpoint directory")
    p.add_argument("--build", choices=("tiny", "full"), help="build a random checkpoint of this size first")
    p.add_argument("--word-tokenizer", action="store_true", help="with --build: ~1 token per word (as Qwen's BPE)")
    p.add_argument("--server-args", default="", help="extra `serve` flags, e.g. '--device cpu'")
    p.add_argument("--agents", default="1,4", help="comma-separated agent counts")
    p.add_argument("--words-per-s", type=float, default=30.0)
    p.add_argument("--bulk", type=int, default=4, help="long texts at once in the xRT run (0 = skip)")
    p.add_argument("--num-step", type=int, default=32)
    p.add_argument("--name", default="omnivoice_continuity", help="results file stem")
    p.add_argument("--out-dir", default=os.environ.get("OUT", str(REPO / "bench" / "results")))
    args = p.parse_args()

    ckpt = args.ckpt
    if args.build:
        import torch

        from realtime_tts.model.checkpoint import build_random_checkpoint

        ckpt = ckpt or tempfile.mkdtemp(prefix=f"omnivoice-{args.build}-")
        build_random_checkpoint(ckpt, size=args.build, seed=0, device="cuda" if torch.cuda.is_available() else None)
        if args.word_tokenizer:
            from omnivoice_bench import write_word_tokenizer

            write_word_tokenizer(Path(ckpt))
    if not ckpt:
        raise SystemExit("--ckpt DIR or --build tiny|full is required")
    on, off = measure(ckpt, True, args), measure(ckpt, False, args)

    date = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    rows = []
    for a_on, a_off in zip(on["agents"], off["agents"], strict=True):
        rows.append(f"| {date} | {git_commit(REPO)} | {a_on['agents']} agents | first audio p50/p95 ms | "
                    f"{a_on['p50_first_audio_ms']:.0f} / {a_on['p95_first_audio_ms']:.0f} | "
                    f"{a_off['p50_first_audio_ms']:.0f} / {a_off['p95_first_audio_ms']:.0f} | "
                    f"underruns {a_on['underruns']} vs {a_off['underruns']} |")
    if on["bulk"] and off["bulk"]:
        b_on, b_off = on["bulk"], off["bulk"]
        rows.append(f"| {date} | {git_commit(REPO)} | {b_on['texts']} long texts | xRT (p50 latency s) | "
                    f"{b_on['xrt']:.1f} ({b_on['p50_s']:.2f}) | {b_off['xrt']:.1f} ({b_off['p50_s']:.2f}) | "
                    f"ok {b_on['ok']} vs {b_off['ok']} |")
    out_path = Path(args.out_dir) / f"{args.name}.md"
    history = history_rows(out_path)
    header = "| date | commit | workload | figure | continuity on | continuity off | notes |\n|---|---|---|---|---|---|---|"
    errors = [e for run in (on, off) for r in run["agents"] for e in r["errors"]]
    errors += [e for run in (on, off) if run["bulk"] for e in run["bulk"]["errors"]]
    report = "\n".join([
        "# One voice per conversation: what continuity costs (OmniVoice)", "",
        f"- command: `{' '.join([os.path.basename(sys.executable), *sys.argv])}`",
        f"- date: {date}; commit {git_commit(REPO)}",
        f"- machine: {platform.node()}, {os.cpu_count()} CPU cores, {device_name()}, Python {platform.python_version()}",
        f"- versions: {versions()}",
        f"- checkpoint: {ckpt} (random weights); num_step {args.num_step}; LLM pace {args.words_per_s} words/s",
        ("- on: the first segment of each socket/request keeps its codes, later segments are conditioned on them "
         "(wait in the worker, longer prompt); off: --voice-continuity false"), "",
        "## This run", "", header, *rows, "",
        *(["Errors (first few): " + "; ".join(errors[:5]), ""] if errors else []),
        "## History", "", header, *history, *rows, "",
    ])
    print(report)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(report)


if __name__ == "__main__":
    main()
