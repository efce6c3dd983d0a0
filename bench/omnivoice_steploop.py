"""Host work per diffusion step and the GPU's idle gaps between steps, in the real worker loop (issue 16 item 1).

Runs gpu_worker/loop.WorkerLoop over the real ModelBackend (full-size random checkpoint, CUDA graphs, the
decode thread) in this process and keeps N segments in flight at once, with the churn of serving: every
segment runs 32 steps, starts staggered, and a new one is submitted the moment one's audio comes back, so
about N/32 segments join and leave at every step. Per N (default 8, 32, 64, 128 items per step) it reports,
over a window of steady steps:

- host ms per step: the loop thread's wall time less the time it blocked waiting for the GPU to catch up
  (runner.stats.wait_s), per step: scheduling, bookkeeping, packing/launching, message handling, GIL time
  lost to the decode and IPC threads;
- GPU busy ms per step and the GPU's idle gap between steps: timing events around every step-graph replay of
  the loop thread (torch.cuda.CUDAGraph.replay, patched here; the codec's graphs in the decode thread are not
  counted): gap = launch of step n+1 − end of step n on the GPU, 0 when the host is ahead.

It measures from outside the loop (wall clock, the runner's wait counter, patched replays), so the same
script measures any tree: PYTHONPATH=TREE python bench/omnivoice_steploop.py ... runs TREE's loop (the
before/after tables of bench/results/omnivoice_steploop_h200.md).

    python bench/omnivoice_steploop.py --ckpt /tmp/omnivoice-full --items 8,32,64,128 --label after \\
        --out-dir OUT [--profile 128]

With --joins-per-step J the join rate is held at J per step at every N instead (each segment runs N / J steps),
which tells host work per item in flight from host work per joining segment.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import itertools
import json
import os
import pstats
import queue
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

from realtime_tts.model.sequence import MAX_STEPS

SENTENCES = (
    "Sure, I can help with that.", "Your order shipped this morning.", "It should arrive on Thursday.",
    "Is there anything else you would like to know?", "Good question, let me check.",
    "The museum opens at nine.", "Tickets are cheaper online.", "The meeting moved to the third floor.",
)


class ReplayTimer:
    """Timing events around every CUDAGraph.replay made by one thread (the loop's)."""

    def __init__(self) -> None:
        self.thread: int | None = None
        self.marks: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self.on = False
        original = torch.cuda.CUDAGraph.replay
        timer = self

        def replay(graph: torch.cuda.CUDAGraph) -> None:
            if not timer.on or threading.get_ident() != timer.thread:
                return original(graph)
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            original(graph)
            end.record()
            timer.marks.append((start, end))
            return None

        torch.cuda.CUDAGraph.replay = replay  # type: ignore[method-assign,assignment]

    def take(self) -> tuple[float, float, int]:
        """(GPU busy s, GPU gap s, steps) of the marks so far (waits for the last), then forget them. No device-wide
        sync: the decode thread may be capturing a codec graph, which a device sync would invalidate."""
        marks, self.marks = self.marks, []
        if not marks:
            return 0.0, 0.0, 0
        marks[-1][1].synchronize()  # the marks are on one stream: all are done then
        busy = sum(s.elapsed_time(e) for s, e in marks) / 1000.0
        gap = sum(max(0.0, e0.elapsed_time(s1)) for (_, e0), (s1, _) in itertools.pairwise(marks)) / 1000.0
        return busy, gap, len(marks)


def run_one(backend: Any, ipc: Any, loop_mod: Any, n: int, budget: int, seconds: float, warm_steps: int,
            timer: ReplayTimer, profile: bool, sample: bool = False, joins: float = 0.0) -> dict[str, Any]:
    """Keep n segments in flight in a fresh WorkerLoop; measure a window of `seconds` after warm_steps.

    joins 0: serving's churn (32-step segments, ~n/32 join and leave per step). joins J > 0: J per step at any n
    (each segment runs n / J steps; the first n are all submitted at once and run 1/J, 2/J, ... n/J steps, so
    they leave staggered), which separates host work per item in flight from host work per joining segment."""
    options = ipc.WorkerOptions(worker_id=0, model_dir="", device=backend.device, dtype="bf16",
                                max_batch_tokens=budget, latency_batch_tokens=0, stats_interval_s=0.25)
    inbox: queue.Queue[Any] = queue.Queue()
    rng = random.Random(n)
    counter = [0]
    lock = threading.Lock()

    def submit() -> None:
        with lock:
            counter[0] += 1
            i = counter[0]
        text = " ".join(rng.sample(SENTENCES, 1))
        num_step = 32 if not joins else max(1, min(MAX_STEPS, round(min(i, n) / joins)))
        inbox.put(ipc.Submit(f"s{i}", text, duration_s=round(rng.uniform(1.5, 2.5), 2), num_step=num_step, seed=i,
                             priority=1))

    def send(message: Any) -> None:
        if isinstance(message, ipc.Audio):
            submit()  # one leaves, one joins: n stay in flight
        elif isinstance(message, ipc.Failed):
            print("failed:", message, flush=True)

    loop = loop_mod.WorkerLoop(options, backend, inbox, send)
    loop.activity_interval_s = float("inf")  # one activity window: its item and token sums cover the run
    runner = backend.runner
    prof = cProfile.Profile() if profile else None
    done = threading.Event()
    loop_clock = [0]

    def run() -> None:
        timer.thread = threading.get_ident()
        loop_clock[0] = time.pthread_getcpuclockid(threading.get_ident())
        if prof is not None:
            prof.enable()
        try:
            loop.run()
        finally:
            if prof is not None:
                prof.disable()
            done.set()

    thread = threading.Thread(target=run, name="loop")
    # staggered start: n/32 segments per step, as in steady serving (all at once with `joins`: their step
    # counts stagger them)
    per_step = n if joins else max(1, n // 32)
    thread.start()
    submitted = 0
    while submitted < n:
        base = runner.stats.steps
        for _ in range(min(per_step, n - submitted)):
            submit()
            submitted += 1
        while runner.stats.steps == base:
            time.sleep(0.0005)
    while runner.stats.steps < warm_steps + (round(n / joins) if joins else 32):
        time.sleep(0.01)
    timer.on = True
    timer.take()
    from realtime_tts.thread_sampler import StackSampler

    sampler = StackSampler(thread_id=thread.ident) if sample and thread.ident is not None else None
    if sampler is not None:
        sampler.start()
    decoder = loop._decoder.ident
    clocks = (loop_clock[0], time.pthread_getcpuclockid(decoder) if decoder is not None else 0)
    cpu0 = [time.clock_gettime(c) for c in clocks]
    steps0, wait0, t0 = runner.stats.steps, runner.stats.wait_s, time.perf_counter()
    act0 = loop._activity
    items0, tokens0, decoded0 = act0.items, act0.tokens, act0.decoded
    time.sleep(seconds)
    steps1, wait1, t1 = runner.stats.steps, runner.stats.wait_s, time.perf_counter()
    cpu1 = [time.clock_gettime(c) for c in clocks]
    act1 = loop._activity
    busy, gap, timed = timer.take()
    sampled = sampler.stop() if sampler is not None else None
    timer.on = False
    inbox.put(ipc.Shutdown())
    done.wait(120)
    thread.join(60)
    steps = max(1, steps1 - steps0)
    same = act0 is act1  # the activity window did not roll over: its item/token sums are this window's
    # joins_per_step_set: the rate asked for (serving churn: n/32); the table's "joins per step" column is the
    # measured one, finished_per_step
    row = {"items": n, "joins_per_step_set": joins or n / 32, "steps": steps, "steps_per_s": steps / (t1 - t0),
           "items_per_step": (act1.items - items0) / steps if same else float("nan"),
           "tokens_per_step": (act1.tokens - tokens0) / steps if same else float("nan"),
           "wall_ms_per_step": 1000 * (t1 - t0) / steps, "wait_ms_per_step": 1000 * (wait1 - wait0) / steps,
           "host_ms_per_step": 1000 * ((t1 - t0) - (wait1 - wait0)) / steps,
           # CPU time the loop thread and the decode thread used (blocked time, e.g. waiting for the GIL or in a
           # launch that waits for room in the GPU's queue, is not CPU time unless the driver spins)
           "loop_cpu_ms_per_step": 1000 * (cpu1[0] - cpu0[0]) / steps,
           "decode_cpu_ms_per_step": 1000 * (cpu1[1] - cpu0[1]) / steps,
           # per step, not per timed replay: since d8bf309 a batch change also replays the bucket's layout graph
           # (timed too: it is the step loop's device work), so replays outnumber steps
           "gpu_busy_ms_per_step": 1000 * busy / steps, "gpu_gap_ms_per_step": 1000 * gap / steps,
           "gpu_idle_pct": 100 * gap / max(1e-9, busy + gap), "timed_replays": timed,
           "finished_per_step": (act1.decoded - decoded0) / steps if same else float("nan")}
    if sampled is not None:
        row["profile"] = sampled
    if prof is not None:
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(30)
        row["profile"] = out.getvalue()
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt", default="/tmp/omnivoice-full")
    p.add_argument("--items", default="8,32,64,128")
    p.add_argument("--seconds", type=float, default=3.0, help="measured window per item count")
    p.add_argument("--warm-steps", type=int, default=40)
    p.add_argument("--max-batch-tokens", type=int, default=16384, help="room for 128 short segments per step")
    p.add_argument("--label", default="this tree")
    p.add_argument("--warm-pass", type=int, default=64, help="an unrecorded pass at this many items first (0: none)")
    p.add_argument("--switch-interval-ms", type=float, default=0.0,
                   help="set the interpreter's thread switch interval first (0: Python's default, 5 ms)")
    p.add_argument("--device", default="cuda:0", help="cpu: a smoke run of the script (tiny checkpoint)")
    p.add_argument("--profile", default="", help="then one more pass at each of these item counts (comma list) with "
                   "the loop thread under cProfile (steploop_profile_<label>_<items>.txt; not in the table)")
    p.add_argument("--sample", action="store_true", help="the extra --profile pass samples the loop thread's "
                   "stack every 0.5 ms instead of running cProfile (only that thread; blocked time included)")
    p.add_argument("--null-decode", action="store_true",
                   help="an A/B of the decode thread's share: finished segments are answered with silence of their "
                        "length without running the codec or copying anything off the device (the loop thread's "
                        "work is unchanged); the label gets ' (null decode)'")
    p.add_argument("--joins-per-step", type=float, default=0.0,
                   help="J > 0: segments join (and leave) at J per step at every item count (each runs items / J "
                        f"steps, at most {MAX_STEPS}: items <= {MAX_STEPS} x J), instead of serving's ~items/32; "
                        "host ms per step then shows what grows with the items in flight alone")
    p.add_argument("--out-dir", default=os.environ.get("OUT", "."))
    args = p.parse_args()
    if args.joins_per_step and max(int(x) for x in args.items.split(",") if x) > MAX_STEPS * args.joins_per_step:
        p.error(f"--joins-per-step {args.joins_per_step}: items above {MAX_STEPS * args.joins_per_step:g} would need "
                f"segments of more than {MAX_STEPS} steps")

    from realtime_tts.engine import ipc
    from realtime_tts.gpu_worker import loop as loop_mod
    from realtime_tts.gpu_worker.backend import ModelBackend

    ckpt = Path(args.ckpt)
    if not (ckpt / "model.safetensors").exists():
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from omnivoice_bench import write_word_tokenizer

        from realtime_tts.model.checkpoint import build_random_checkpoint

        build_random_checkpoint(ckpt, size="full", seed=0, device="cuda")
        write_word_tokenizer(ckpt)
    t0 = time.perf_counter()
    options = ipc.WorkerOptions(worker_id=0, model_dir=str(ckpt), device=args.device,
                                dtype="bf16" if args.device.startswith("cuda") else "fp32",
                                max_batch_tokens=args.max_batch_tokens, codec_graph_frames=400,
                                precision="reference", swiglu_gemm_min_tokens=8192)
    backend = ModelBackend(options)
    print(f"backend ready in {time.perf_counter() - t0:.1f} s", flush=True)
    if args.null_decode:
        hop = backend.model.codec.hop_length  # samples per frame
        backend.decode = lambda states: [bytes(4 * hop * s.item.num_frames) for s in states]  # type: ignore[method-assign]
        args.label += " (null decode)"
    if args.switch_interval_ms:  # an A/B of the interpreter's GIL switch interval (the worker keeps the default)
        sys.setswitchinterval(args.switch_interval_ms / 1000.0)
    timer = ReplayTimer()
    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    rows = []
    # the profiled pass (if any) runs after the table's, so the profiler's overhead is in no row
    table = [int(x) for x in args.items.split(",") if x]
    if args.warm_pass:
        # first-use costs out of the table: the codec's graphs are captured per length on first use (a 8-item
        # table pass that ran first measured 90 steps/s with the GPU 76% idle; the same pass later, 362 and 8%)
        run_one(backend, ipc, loop_mod, args.warm_pass, args.max_batch_tokens, 2.0, args.warm_steps, timer, False)
    passes = table + [int(x) for x in args.profile.split(",") if x]
    for i, n in enumerate(passes):
        profiled = i >= len(table)
        row = run_one(backend, ipc, loop_mod, n, args.max_batch_tokens, args.seconds, args.warm_steps, timer,
                      profiled and not args.sample, profiled and args.sample, args.joins_per_step)
        row["label"] = args.label
        prof = row.pop("profile", None)
        print(json.dumps(row), flush=True)
        if prof:
            print(prof, flush=True)
            slug = "".join(c if c.isalnum() else "_" for c in args.label).strip("_")
            (Path(args.out_dir) / f"steploop_profile_{slug}_{n}.txt").write_text(json.dumps(row) + "\n" + prof)
            continue
        rows.append(row)
    commit = subprocess.run(["git", "log", "--format=%h %cs", "-1"], capture_output=True, text=True,
                            check=False).stdout.strip()
    lines = [f"### {args.label}", "", f"- command: `python {' '.join(sys.argv)}`",
             (f"- tree: {os.environ.get('PYTHONPATH', '.')} ({commit or 'no git'}), "
             f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'CPU'}, "
             f"torch {torch.__version__}; thread switch interval {sys.getswitchinterval() * 1000:g} ms"), "",
             ("| items in flight | joins per step | steps/s | items / tokens per step | wall ms/step | host ms/step | waits for GPU "
             "ms/step | loop thread CPU ms/step | decode thread CPU ms/step | GPU busy ms/step | GPU idle gap ms/step "
             "| GPU idle % |"), "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['items']} | {r['finished_per_step']:.2f} | {r['steps_per_s']:.0f} | {r['items_per_step']:.1f} / {r['tokens_per_step']:.0f} "
                     f"| {r['wall_ms_per_step']:.2f} | {r['host_ms_per_step']:.2f} | {r['wait_ms_per_step']:.2f} "
                     f"| {r['loop_cpu_ms_per_step']:.2f} | {r['decode_cpu_ms_per_step']:.2f} "
                     f"| {r['gpu_busy_ms_per_step']:.2f} | {r['gpu_gap_ms_per_step']:.3f} | {r['gpu_idle_pct']:.1f} |")
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "omnivoice_steploop.md", "a") as f:
        f.write("\n".join(lines) + "\n\n")
    with open(out / "omnivoice_steploop.jsonl", "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
