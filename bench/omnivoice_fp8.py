"""FP8 projections against bf16: the fused backbone's forward time per step size, and how far FP8 moves its output.

Both backbones (gpu_worker/runner.FusedBackbone, bf16 residual as the server's precision "reference"; one with
fp8=True) run on the same random embeddings, packed in rows as a serving step packs them (cond rows of ~200 tokens,
uncond rows of ~120), each forward captured in a CUDA graph and replayed (as the worker does). Columns: ms per
forward (median over --reps timings of --iters replays), the speed-up, and the relative L2 distance of the FP8
hidden state from the bf16 one. The head, scoring and host work of a step are not in it: the server's own step
times per bucket are in its log ("step times"). Random weights: the distance says how much FP8 perturbs this
network, not what it does to the released model's audio.

    python bench/omnivoice_fp8.py --ckpt /tmp/omnivoice-full [--build] [--tokens 1024,2048,4096,8192,16384]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import git_commit, history_rows

from realtime_tts.gpu_worker.runner import FusedBackbone
from realtime_tts.model import OmniVoiceModel

RESULTS = Path(__file__).resolve().parent / "results"


def packed(n: int, hidden: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """n tokens as a serving step holds them: alternating rows of 200 and 120 tokens (the last one shorter)."""
    lengths: list[int] = []
    while sum(lengths) < n:
        lengths.append(min(200 if len(lengths) % 2 == 0 else 120, n - sum(lengths)))
    g = torch.Generator().manual_seed(seed)
    embeds = torch.randn(n, hidden, generator=g).to("cuda", torch.bfloat16)
    positions = torch.cat([torch.arange(k) for k in lengths]).to("cuda")
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    return embeds, positions, cu, max(lengths)


def time_graph(fn: torch.cuda.CUDAGraph, iters: int, reps: int) -> float:
    """Median ms of one replay over reps timings of iters back-to-back replays."""
    times: list[float] = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record()
        for _ in range(iters):
            fn.replay()
        end.record()
        end.synchronize()
        times.append(float(start.elapsed_time(end)) / iters)
    return sorted(times)[len(times) // 2]


def measure(model: OmniVoiceModel, sizes: list[int], iters: int, reps: int) -> list[dict[str, float]]:
    backbones = {"bf16": FusedBackbone(model, residual_dtype=torch.bfloat16),
                 "fp8": FusedBackbone(model, residual_dtype=torch.bfloat16, fp8=True)}
    rows = []
    for n in sizes:
        embeds, positions, cu, longest = packed(n, model.llm.cfg["hidden_size"], seed=n)
        row: dict[str, float] = {"tokens": n}
        outs = {}
        for name, fb in backbones.items():
            with torch.inference_mode():
                for _ in range(3):  # warm-up: Triton autotuning and cuBLASLt heuristics before the capture
                    fb(embeds, positions, cu, longest)
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    out = fb(embeds, positions, cu, longest)
                graph.replay()
                torch.cuda.synchronize()
                outs[name] = out.float().clone()
                row[f"{name}_ms"] = time_graph(graph, iters, reps)
            del graph
        ref = outs["bf16"]
        row["rel_err"] = float((outs["fp8"] - ref).norm() / ref.norm())
        row["speedup"] = row["bf16_ms"] / row["fp8_ms"]
        rows.append(row)
        print(f"| {n} | {row['bf16_ms']:.3f} | {row['fp8_ms']:.3f} | {row['speedup']:.2f}x | {row['rel_err']:.4f} |",
              flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt", required=True)
    p.add_argument("--build", action="store_true", help="build a full random checkpoint at --ckpt if it has none")
    p.add_argument("--tokens", default="1024,2048,4096,8192,16384")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--out-dir", default=str(RESULTS))
    args = p.parse_args()
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9):
        raise SystemExit("error: needs a CUDA GPU with FP8 tensor cores (sm89+)")
    if args.build and not (Path(args.ckpt) / "config.json").exists():
        from realtime_tts.model.checkpoint import build_random_checkpoint

        print(json.dumps(build_random_checkpoint(args.ckpt, size="full", device="cuda")), flush=True)
    model = OmniVoiceModel.from_pretrained(args.ckpt, dtype=torch.bfloat16, device="cuda", load_codec=False)
    head = "| tokens per step | bf16 ms | fp8 ms | speed-up | fp8 vs bf16 hidden rel. L2 |\n|---|---|---|---|---|"
    print(head, flush=True)
    rows = measure(model, [int(x) for x in args.tokens.split(",") if x], args.iters, args.reps)
    out = Path(args.out_dir) / "omnivoice_fp8_h200.md"
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    commit = git_commit(Path(__file__).resolve().parents[1])
    table = "\n".join(f"| {int(r['tokens'])} | {r['bf16_ms']:.3f} | {r['fp8_ms']:.3f} | {r['speedup']:.2f}x "
                      f"| {r['rel_err']:.4f} |" for r in rows)
    at = {int(r["tokens"]): r for r in rows}
    mid = at.get(4096, rows[-1])
    latest = (f"| {when} | {commit} | {torch.cuda.get_device_name()} | {int(mid['tokens'])} "
              f"| {mid['bf16_ms']:.3f} / {mid['fp8_ms']:.3f} | {mid['rel_err']:.4f} |")
    history = [*history_rows(out), latest]
    out.write_text(
        "# FP8 projections vs bf16: the fused backbone's forward (bench/omnivoice_fp8.py)\n\n"
        f"- command: `python bench/omnivoice_fp8.py {' '.join(sys.argv[1:])}`\n"
        f"- machine: {torch.cuda.get_device_name()}; torch {torch.__version__}, CUDA {torch.version.cuda}\n"
        f"- commit: {commit}\n- date: {when}\n- checkpoint: {args.ckpt} (random weights)\n\n"
        f"{head}\n{table}\n\n## History\n\n| date | commit | device | tokens | bf16 / fp8 ms | rel. L2 |\n"
        "|---|---|---|---|---|---|\n" + "\n".join(history) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
