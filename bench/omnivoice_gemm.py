"""The backbone's four projections at bulk and serving token counts: cuBLAS (torch.matmul, as FusedBackbone
runs them) beside our Triton TMA matmuls (realtime_tts/gpu_worker/kernels/gemm.py) over a sweep of tile configs,
and the MLP's gate/up GEMM + SwiGLU (cuBLAS then silu_mul) beside the fused swiglu_gemm. CUDA only.

    python bench/omnivoice_gemm.py [--tokens 42368,43008,62720,6144,1024] [--out-dir bench/results]

Prints a table; writes <out-dir>/omnivoice_gemm.md and .jsonl (command, machine, versions, date).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# Qwen3-0.6B, the OmniVoice backbone: hidden 1024, 16 q / 8 kv heads of 128, intermediate 3072
PROJECTIONS = {"qkv": (4096, 1024), "o": (1024, 2048), "gate_up": (6144, 1024), "down": (1024, 3072)}
# block_n is per half: the tile's product is block_m × 2·block_n
SWIGLU_CONFIGS = ["128,128,64,8,3,8,1", "128,128,64,8,4,8,1", "128,128,64,8,3,8,0", "128,128,64,8,3,16,1",
                  "128,128,64,8,3,4,1", "128,64,64,8,4,8,1", "128,64,64,4,4,8,1", "256,64,64,8,3,8,1",
                  "128,128,32,8,5,8,1", "64,128,64,4,4,8,1"]
GEMM_CONFIGS = ["128,256,64,8,3,8,1", "128,256,64,8,4,8,1", "128,128,64,4,4,8,1", "128,256,64,8,3,16,1"]


def timed(fn: Any) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=50, rep=300, return_mode="median"))


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def bench_projection(name: str, m: int, rows: list[dict[str, Any]]) -> None:
    from realtime_tts.gpu_worker.kernels import silu_mul
    from realtime_tts.gpu_worker.kernels.gemm import GemmConfig, gemm, interleave_gate_up, swiglu_gemm

    n, k = PROJECTIONS[name]
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    w = (torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g) * k ** -0.5).to(torch.bfloat16)
    flops = 2.0 * m * n * k

    def row(variant: str, ms: float, err: float | None = None) -> None:
        rows.append({"proj": name, "tokens": m, "variant": variant, "ms": round(ms, 4),
                     "tflops": round(flops / ms / 1e9, 1), "rel_err": None if err is None else round(err, 6)})

    ref = torch.matmul(x, w.t())
    row("cublas", timed(lambda: torch.matmul(x, w.t())))
    wt = w.t().contiguous()
    row("cublas_nn", timed(lambda: torch.matmul(x, wt)), rel_err(torch.matmul(x, wt), ref))
    if name == "gate_up":
        inter = n // 2

        def eager() -> torch.Tensor:
            gu = torch.matmul(x, w.t())
            return silu_mul(gu[:, :inter], gu[:, inter:])

        act_ref = eager()
        row("cublas+silu_mul", timed(eager))
        for spec in SWIGLU_CONFIGS:
            cfg = GemmConfig.parse(spec)
            try:
                tiles = interleave_gate_up(w, cfg.block_n)
                err = rel_err(swiglu_gemm(x, tiles, inter, config=cfg), act_ref)
                row(f"swiglu_gemm {cfg.label()}",
                    timed(lambda c=cfg, t=tiles: swiglu_gemm(x, t, inter, config=c)), err)
            except Exception as e:  # noqa: BLE001 - a config out of shared memory: rank the rest
                rows.append({"proj": name, "tokens": m, "variant": f"swiglu_gemm {cfg.label()}",
                             "error": repr(e)[:160]})
        return
    for spec in GEMM_CONFIGS:
        cfg = GemmConfig.parse(spec)
        try:
            err = rel_err(gemm(x, w, config=cfg), ref)
            row(f"triton {cfg.label()}", timed(lambda c=cfg: gemm(x, w, config=c)), err)
        except Exception as e:  # noqa: BLE001
            rows.append({"proj": name, "tokens": m, "variant": f"triton {cfg.label()}", "error": repr(e)[:160]})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", default="42368,43008,62720,6144,1024")
    p.add_argument("--projections", default="gate_up,down,o,qkv")
    p.add_argument("--triton-tokens", default="42368,6144",
                   help="token counts that also run the Triton sweeps (cuBLAS runs at every --tokens)")
    p.add_argument("--out-dir", default="bench/results")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("omnivoice_gemm.py needs CUDA")
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    triton_tokens = {int(t) for t in args.triton_tokens.split(",") if t}
    rows: list[dict[str, Any]] = []
    t0 = time.time()
    for m in (int(t) for t in args.tokens.split(",")):
        for name in args.projections.split(","):
            if m in triton_tokens:
                bench_projection(name, m, rows)
            else:  # cuBLAS only
                n, k = PROJECTIONS[name]
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
                ms = timed(lambda x=x, w=w: torch.matmul(x, w.t()))
                rows.append({"proj": name, "tokens": m, "variant": "cublas", "ms": round(ms, 4),
                             "tflops": round(2.0 * m * n * k / ms / 1e9, 1), "rel_err": None})
            print(f"{name} {m}: done at {time.time() - t0:.0f} s", flush=True)
    import triton

    env = (f"{torch.cuda.get_device_name()}; torch {torch.__version__}, CUDA {torch.version.cuda}, "
           f"triton {triton.__version__}, python {sys.version.split()[0]}")
    lines = ["# Backbone projections: cuBLAS vs Triton TMA matmuls (and the fused gate/up + SwiGLU)", "",
             f"Command: `python bench/omnivoice_gemm.py {' '.join(sys.argv[1:])}`", "",
             f"Machine: {env}", "", f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
             ("ms: median of triton.testing.do_bench (bf16, fp32 accumulation); rel_err against cuBLAS "
              "(gate_up: against cuBLAS + silu_mul)."), "",
             "| proj | tokens | variant | ms | TFLOP/s | rel_err |", "|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['proj']} | {r['tokens']} | {r['variant']} | error: {r['error']} | | |")
        else:
            lines.append(f"| {r['proj']} | {r['tokens']} | {r['variant']} | {r['ms']} | {r['tflops']} "
                         f"| {r['rel_err'] if r['rel_err'] is not None else ''} |")
    report = "\n".join(lines) + "\n"
    print(report)
    (out_dir / "omnivoice_gemm.md").write_text(report)
    with open(out_dir / "omnivoice_gemm.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
