"""Codec decode jobs the old way and the new way (issue 16 item 2): the device time a decode job of finished
segments costs, per job and per second of audio.

- per_length: the scheme before (gpu_worker/codec_graphs.PerLengthCodecGraphs): each segment one replay of a
  batch-1 CUDA graph captured per exact length.
- batched: gpu_worker/codec_graphs.CodecGraphs: the job's grids sorted by length and cut into padded chunks, each
  one replay of a graph per (batch bucket, frame bucket) with the lengths as a device input; the decoder masks
  each item past its length (model/codec_batch.py), so each segment's audio is its own unpadded decode's.

On CUDA: the full-size random checkpoint's codec (built with --build when --ckpt has none), the decoder as the
worker runs it (fused Snake + channels-last fused decoder + fused residual units, StepRunner's defaults), jobs of
--jobs segments (lengths drawn uniformly from --min-frames..--max-frames), --reps jobs of each size, each variant
warmed up on the same jobs first (graph captures excluded). Device ms: CUDA events around the decode call on a
side stream, as the worker's ModelBackend.decode times it (copies to the host included); host ms: the call's wall
time. max err: against each segment decoded alone by the stock decoder (Codec.decode), over the first job of
each size. Without CUDA (a smoke run: --ckpt a tiny checkpoint): Codec.decode per segment against the eager
masked batches (model/codec_batch.decode_batched), wall ms.

    python bench/omnivoice_codec.py --ckpt /tmp/omnivoice-full --build --jobs 1,4,16,64 --out-dir OUT

Prints a table; writes <out-dir>/omnivoice_codec_h200.md (CUDA; omnivoice_codec_cpu.md without) and .jsonl
(command, machine, versions, commit, date).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import cpu_model, versions

from realtime_tts.model.codec import Codec
from realtime_tts.model.codec_batch import decode_batched

FRAME_RATE = 25


def make_jobs(sizes: list[int], reps: int, lo: int, hi: int, seed: int, device: str) -> dict[int, list[list[Any]]]:
    """{job size: reps jobs, each a list of random code grids [8, T], T uniform in lo..hi}, on `device`."""
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    return {n: [[torch.randint(0, 1024, (8, rng.randint(lo, hi)), generator=g).to(device) for _ in range(n)]
                for _ in range(reps)] for n in sizes}


def timed_cuda(fn: Callable[[], Any], stream: Any) -> tuple[Any, float, float]:
    """fn() on `stream` → (its result, device ms between events around it, host wall ms)."""
    start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    t0 = time.perf_counter()
    with torch.cuda.stream(stream):
        start.record()
        out = fn()
        end.record()
    end.synchronize()
    return out, start.elapsed_time(end), 1000 * (time.perf_counter() - t0)


def max_err(out: list[np.ndarray], ref: list[np.ndarray]) -> float:
    assert [w.shape for w in out] == [w.shape for w in ref]
    return max(float(np.abs(a - r).max()) for a, r in zip(out, ref, strict=True))


def run_cuda(args: argparse.Namespace, jobs: dict[int, list[list[Any]]]) -> list[dict[str, Any]]:
    from realtime_tts.gpu_worker.codec_graphs import CodecGraphs, PerLengthCodecGraphs
    from realtime_tts.gpu_worker.kernels import use_fused_codec, use_fused_snake
    from realtime_tts.gpu_worker.runner import CODEC_CHANNELS_LAST, CODEC_UNITS

    codec = Codec.from_pretrained(Path(args.ckpt) / "audio_tokenizer", device="cuda")
    # each first job's segments decoded alone by the stock decoder: the reference audio
    refs = {n: [codec.decode([g])[0] for g in js[0]] for n, js in jobs.items()}
    use_fused_snake(codec.model)
    use_fused_codec(codec.model, channels_last=CODEC_CHANNELS_LAST, fused_units=CODEC_UNITS and CODEC_CHANNELS_LAST)
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    rows: list[dict[str, Any]] = []
    for variant in args.variants.split(","):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        if variant == "per_length":
            dec: Any = PerLengthCodecGraphs(codec, max_frames=args.graph_frames)
        elif variant.split(":")[0] == "batched":
            # batched[:frame_step=N][:max_batch_frames=N][:pad_ratio=X][:buckets=1-2-4-...]: overrides of the flags
            opts = {"frame_step": args.frame_step, "max_batch_frames": args.max_batch_frames,
                    "max_pad_ratio": args.pad_ratio, "batch_buckets": (1, 2, 4, 8, 16)}
            for part in variant.split(":")[1:]:
                key, value = part.split("=")
                if key == "buckets":
                    opts["batch_buckets"] = tuple(int(b) for b in value.split("-"))
                else:
                    opts["max_pad_ratio" if key == "pad_ratio" else key] = float(value) if key == "pad_ratio" \
                        else int(value)
            dec = CodecGraphs(codec, max_frames=args.graph_frames, **opts)
        else:
            sys.exit(f"unknown variant {variant!r} (per_length, batched[:key=value...])")
        t0 = time.perf_counter()
        for js in jobs.values():  # warm-up: every graph these jobs need captured
            for job in js:
                timed_cuda(lambda job=job, dec=dec: dec.decode(job), stream)
        warm_s = time.perf_counter() - t0
        for n, js in jobs.items():
            calls0, items0 = dec.stats.calls, dec.stats.items
            dev_ms, host_ms, audio_s, err = [], [], 0.0, 0.0
            for k, job in enumerate(js):
                out, d, h = timed_cuda(lambda job=job, dec=dec: dec.decode(job), stream)
                dev_ms.append(d)
                host_ms.append(h)
                audio_s += sum(g.shape[-1] for g in job) / FRAME_RATE
                if k == 0:
                    err = max_err(out, refs[n])
            calls = dec.stats.calls - calls0
            rows.append({"variant": variant, "segments": n, "jobs": len(js),
                         "device_ms_per_job": round(float(np.mean(dev_ms)), 3),
                         "device_ms_per_job_p50": round(float(np.median(dev_ms)), 3),
                         "device_ms_per_audio_s": round(float(np.sum(dev_ms)) / audio_s, 4),
                         "host_ms_per_job": round(float(np.mean(host_ms)), 3),
                         "calls_per_job": round(calls / len(js), 2),
                         "items_per_call": round((dec.stats.items - items0) / max(1, calls), 2),
                         "max_err": float(f"{err:.3g}"), "graphs": len(dec.graphs),
                         "capture_s": round(dec.stats.capture_s, 2), "warm_up_s": round(warm_s, 2),
                         "peak_gib": round(torch.cuda.max_memory_allocated() / 2 ** 30, 2)})
            print(json.dumps(rows[-1]), flush=True)
        del dec
        torch.cuda.empty_cache()
    return rows


def run_cpu(args: argparse.Namespace, jobs: dict[int, list[list[Any]]]) -> list[dict[str, Any]]:
    codec = Codec.from_pretrained(Path(args.ckpt) / "audio_tokenizer")
    rows: list[dict[str, Any]] = []
    for n, js in jobs.items():
        ref: list[np.ndarray] = []
        for variant in ("per_item", "batched_eager"):
            wall, audio_s, err = [], 0.0, 0.0
            for k, job in enumerate(js):
                t0 = time.perf_counter()
                if variant == "per_item":
                    out = [codec.decode([g])[0] for g in job]
                else:
                    out = decode_batched(codec.model, job, max_batch_frames=args.max_batch_frames,
                                         max_pad_ratio=args.pad_ratio)
                wall.append(1000 * (time.perf_counter() - t0))
                audio_s += sum(g.shape[-1] for g in job) / FRAME_RATE
                if k == 0:
                    if variant == "per_item":
                        ref = out
                    err = max_err(out, ref)
            rows.append({"variant": variant, "segments": n, "jobs": len(js),
                         "wall_ms_per_job": round(float(np.mean(wall)), 3),
                         "wall_ms_per_audio_s": round(float(np.sum(wall)) / audio_s, 4), "max_err": float(f"{err:.3g}")})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def report(args: argparse.Namespace, rows: list[dict[str, Any]], cuda: bool) -> str:
    import transformers

    if cuda:
        import triton

        machine = (f"{torch.cuda.get_device_name()}, {cpu_model()}; torch {torch.__version__}, CUDA "
                   f"{torch.version.cuda}, triton {triton.__version__}, transformers {transformers.__version__}")
    else:
        machine = f"{cpu_model()} (CPU, {torch.get_num_threads()} threads); torch {torch.__version__}"
    lines = ["# Codec decode jobs: batch-1 graphs per length vs padded masked batches", "",
             f"Command: `python bench/omnivoice_codec.py {' '.join(sys.argv[1:])}`", "",
             f"Machine: {machine}", "", f"Versions: {versions('torch', 'transformers', 'triton')}", "",
             f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
             (f"Jobs: {args.reps} per size, segment lengths uniform in {args.min_frames}..{args.max_frames} "
              f"frames (25 per second); codec graphs up to {args.graph_frames} frames, batched: at most "
              f"{args.max_batch_frames} frames per call, frame buckets of {args.frame_step}, no segment under "
              f"the chunk's longest / {args.pad_ratio}."), ""]
    if cuda:
        lines += [("Device ms: CUDA events around the decode call on its own stream (as ModelBackend.decode times "
                   "it), mean over the jobs (p50 beside it); per audio s: device ms per second of audio decoded. max "
                   "err: against each segment decoded alone by the stock decoder (first job of each size)."), "",
                  ("| variant | segments/job | device ms/job | p50 | device ms per audio s | host ms/job | calls/job "
                   "| items/call | max err | graphs | peak GiB |"),
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['variant']} | {r['segments']} | {r['device_ms_per_job']} | {r['device_ms_per_job_p50']} "
                         f"| {r['device_ms_per_audio_s']} | {r['host_ms_per_job']} | {r['calls_per_job']} "
                         f"| {r['items_per_call']} | {r['max_err']} | {r['graphs']} | {r['peak_gib']} |")
    else:
        lines += ["CPU smoke run (no graphs): wall ms per job.", "",
                  "| variant | segments/job | wall ms/job | wall ms per audio s | max err |", "|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['variant']} | {r['segments']} | {r['wall_ms_per_job']} | {r['wall_ms_per_audio_s']} "
                         f"| {r['max_err']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt", default="/tmp/omnivoice-full")
    p.add_argument("--build", action="store_true", help="build a full random checkpoint at --ckpt if it has none")
    p.add_argument("--jobs", default="1,4,16,64", help="segments per decode job (comma list)")
    p.add_argument("--reps", type=int, default=20, help="jobs of each size")
    p.add_argument("--min-frames", type=int, default=40)
    p.add_argument("--max-frames", type=int, default=90)
    p.add_argument("--variants", default="per_length,batched",
                   help="comma list: per_length, batched[:frame_step=N][:max_batch_frames=N][:pad_ratio=X]"
                        "[:buckets=1-2-4-8-16]")
    p.add_argument("--graph-frames", type=int, default=400, help="codec_graph_frames")
    p.add_argument("--max-batch-frames", type=int, default=2048)
    p.add_argument("--frame-step", type=int, default=16)
    p.add_argument("--pad-ratio", type=float, default=1.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default="bench/results")
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    if args.build and not (Path(args.ckpt) / "audio_tokenizer" / "config.json").exists():
        from realtime_tts.model.checkpoint import build_random_checkpoint

        print(json.dumps(build_random_checkpoint(args.ckpt, size="full", device="cuda" if cuda else None)),
              flush=True)
    sizes = [int(n) for n in args.jobs.split(",") if n]
    jobs = make_jobs(sizes, args.reps, args.min_frames, args.max_frames, args.seed, "cuda" if cuda else "cpu")
    rows = run_cuda(args, jobs) if cuda else run_cpu(args, jobs)
    text = report(args, rows, cuda)
    print(text)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    name = "omnivoice_codec_h200" if cuda else "omnivoice_codec_cpu"
    (out_dir / f"{name}.md").write_text(text)
    with open(out_dir / f"{name}.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
