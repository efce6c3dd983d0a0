"""OmniVoice on one GPU: our engine (StepRunner: fused Triton backbone + CUDA graphs) side by side with the
reference `omnivoice` 0.2.1 generate(), in ONE run on the same full-size random weights.

    python bench/omnivoice_bench.py --out-dir OUT [--ckpt DIR] [--batches 1,16,64,128] [--modes design,clone]
        [--ref-batches 1,64] [--steps 32] [--dur 6] [--budget-s 540] [--no-ref] [--precision fp32|reference]

Measures: bulk xRT (seconds of audio per wall second, diffusion + batched codec decode) at each batch,
MFU of the diffusion loop against 775 TFLOP/s (useful FLOPs: real tokens only), single-utterance latency
(6 s design), kernel micro-timings. Prints a table; writes OUT/omnivoice_bench.{jsonl,md}.

On the GPU box the reference needs wheels carried in (omnivoice 0.2.1 --no-deps, soundfile, cffi, pycparser,
pydub; e.g. the ignored folder .whl_model): `python3 -m pip install -q --no-index --no-deps --target /tmp/site
.whl_model/*.whl && PYTHONPATH=/tmp/site:$PWD python3 bench/omnivoice_bench.py --out-dir $OUT --profile`.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from realtime_tts.config import OmniVoiceConfig  # noqa: E402 - after the path insert
from realtime_tts.gpu_worker.runner import CODEC_CHANNELS_LAST, CODEC_UNITS  # noqa: E402 - after the path insert

CARD_TFLOPS = 775.0  # bf16 dense, measured on this card (../shared/docs/BASELINE.md)
INSTRUCT = "female, young adult, moderate pitch"
REF_SECONDS = 5
# Bench text vocabulary (data): the word-level tokenizer below gives ~1 token per word, like Qwen's BPE on
# plain English, so sequence lengths match the released model's (6 s design: ~180-token cond row).
WORDS = ["morning", "river", "carries", "quiet", "light", "across", "stone", "bridges", "while", "children", "laugh", "near", "open", "windows", "and", "old", "friends", "share", "warm", "bread", "under", "tall", "green", "trees", "before", "evening", "rain", "returns", "softly", "over", "hills", "where", "farmers", "count", "their", "sheep", "and", "dream", "of", "summer", "roads"]
EXTRA = ["None", "en", "female", "male", "young", "adult", "moderate", "pitch", "low", "high"]
T_START = time.time()
RECORDS: list[dict[str, Any]] = []


def emit(out_dir: Path, rec: dict[str, Any]) -> None:
    rec["t_s"] = round(time.time() - T_START, 1)
    RECORDS.append(rec)
    with open(out_dir / "omnivoice_bench.jsonl", "a") as f:
        f.write(json.dumps(rec) + "\n")
    print("RESULT", json.dumps(rec), flush=True)


def make_text(num_words: int, offset: int) -> str:
    words = [WORDS[(offset * 7 + i) % len(WORDS)] for i in range(num_words)]
    return " ".join(words).capitalize() + "."


def write_word_tokenizer(ckpt: Path) -> None:
    """Replace the checkpoint's tokenizer by a word-level one over the bench vocabulary (+ control tokens)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from realtime_tts.model.checkpoint import SPECIAL_TOKENS

    vocab = {"[UNK]": 0}
    for w in EXTRA + WORDS + [w.capitalize() for w in WORDS] + list(",.!?;:'-"):
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=SPECIAL_TOKENS[0], unk_token="[UNK]").save_pretrained(
        str(ckpt))


def step_flops(model: Any, batch: Any) -> float:
    """Useful FLOPs of one step over a packed batch: linear layers on real tokens, the audio head on target
    positions of both rows, bidirectional attention per row."""
    cfg = model.llm.cfg
    h, d, hq, hkv, inter, layers = (cfg["hidden_size"], cfg["head_dim"], cfg["num_attention_heads"],
                                    cfg["num_key_value_heads"], cfg["intermediate_size"], cfg["num_hidden_layers"])
    per_tok = layers * (h * (hq + 2 * hkv) * d + hq * d * h + 3 * h * inter)
    lens = (batch.cu_seqlens[1:] - batch.cu_seqlens[:-1]).double()
    attn = 4.0 * float((lens ** 2).sum()) * hq * d * layers
    targets = 2 * int(batch.num_frames.sum())
    return 2.0 * per_tok * batch.num_tokens + 2.0 * h * model.num_codebooks * model.audio_vocab * targets + attn


def sync() -> None:
    torch.cuda.synchronize()


# cfg_argmax configurations timed beside the legacy kernel: (rows_per_program, num_warps)
CFG_ARGMAX_CONFIGS = [(1, 1), (2, 1), (4, 1), (2, 2), (4, 2), (4, 4), (8, 4), (8, 8), (16, 8)]


def bench_cfg_argmax(out_dir: Path) -> None:
    """The scoring kernel at a B=128 6 s design step's shape ([128, 8·192, 1025] logits, bf16 as the reference
    precision's head gives them, fp32 as ours): the legacy one-position kernel vs the tiled variant's configs.
    Per kernel: tokens differing from cfg_argmax_ref's (fp32) and, over those, the largest float64 log-prob gap
    between the two tokens (bf16 logits give exact ties that fp32 rounding breaks either way: the interpreter
    saw ~4 in 10^4 positions differ, the legacy kernel's as often). equal: confidences within 1e-5 and every
    differing token a tie to 1e-5 in float64; equal_strict: no token differs at all."""
    from triton.testing import do_bench

    from realtime_tts.gpu_worker import kernels
    from realtime_tts.gpu_worker.kernels.scoring import cfg_log_probs_ref

    shape, mask_id = (128, 8 * 192, 1025), 1024
    for dtype in (torch.bfloat16, torch.float32):
        rec: dict[str, Any] = {"kind": "cfg_argmax", "shape": list(shape), "dtype": str(dtype).split(".")[-1]}
        try:
            gen = torch.Generator(device="cuda").manual_seed(0)
            c = (3 * torch.randn(*shape, device="cuda", generator=gen)).to(dtype)  # [B, 8·T, V]
            u = (3 * torch.randn(*shape, device="cuda", generator=gen)).to(dtype)
            c[:, ::50, mask_id] = 40.0  # MASK sometimes holds the max: it must never be chosen
            guidance = torch.full((shape[0],), 2.0, device="cuda")
            guidance[::16] = 0.0  # a few unguided items
            ref_pred, ref_conf = kernels.cfg_argmax_ref(c, u, guidance, mask_id)
            ref_fn = functools.partial(kernels.cfg_argmax_ref, c, u, guidance, mask_id)
            rec["torch_ref_ms"] = round(do_bench(ref_fn, return_mode="median"), 4)
            rec["min_traffic_gb"] = round(2 * c.numel() * c.element_size() / 1e9, 3)
            ref64_pred = cfg_log_probs_ref(c, u, guidance.double(), mask_id, torch.float64).argmax(dim=-1)
            rec["ref32_vs_ref64_pred_mismatch"] = int((ref_pred != ref64_pred).sum())
            del ref64_pred
            flat_c, flat_u = c.view(-1, shape[2]), u.view(-1, shape[2])  # [B·R, V]
            row_g = guidance.double().repeat_interleave(shape[1])  # [B·R]
            runs = [("legacy", "legacy", 1, 4, True)]
            runs += [(f"rows_r{r}w{w}", "rows", r, w, True) for r, w in CFG_ARGMAX_CONFIGS]
            runs.append(("rows_r1w1_nofma", "rows", 1, 1, False))  # torch's roundings in the guidance combine
            equal = strict = True
            for name, variant, rows, warps, fusion in runs:
                fn = functools.partial(kernels.cfg_argmax, c, u, guidance, mask_id, variant=variant,
                                       rows_per_program=rows, num_warps=warps, fp_fusion=fusion)
                pred, conf = fn()
                bad_pred = int((pred != ref_pred).sum())
                bad_conf = int((~torch.isclose(conf, ref_conf, atol=1e-5, rtol=1e-5)).sum())
                rec[f"{name}_pred_mismatch"], rec[f"{name}_conf_mismatch"] = bad_pred, bad_conf
                rec[f"{name}_conf_max_abs_err"] = float((conf - ref_conf).abs().max())
                gap = 0.0
                bad = (pred != ref_pred).view(-1).nonzero().squeeze(1)  # [n] differing positions
                if bad.numel():
                    lp64 = cfg_log_probs_ref(flat_c[bad], flat_u[bad], row_g[bad], mask_id, torch.float64)
                    ours, theirs = pred.view(-1)[bad, None], ref_pred.view(-1)[bad, None]
                    gap = float((lp64.gather(1, ours) - lp64.gather(1, theirs)).abs().max())
                rec[f"{name}_pred_mismatch_max_gap64"] = gap
                equal = equal and gap < 1e-5 and bad_conf == 0 and not bool((pred == mask_id).any())
                strict = strict and bad_pred == 0
                rec[f"{name}_ms"] = round(do_bench(fn, return_mode="median"), 4)
            rec["equal"], rec["equal_strict"] = equal, strict
            best = min((n for n, *_ in runs if n != "legacy"), key=lambda n: rec[f"{n}_ms"])
            rec["best"], rec["best_ms"] = best, rec[f"{best}_ms"]
            rec["best_speedup"] = round(rec["legacy_ms"] / rec["best_ms"], 2)
            rec["best_gbps"] = round(rec["min_traffic_gb"] / rec["best_ms"] * 1e3, 1)
        except Exception as e:  # noqa: BLE001 - keep the other kernel numbers
            rec["err"] = repr(e)[:300]
        emit(out_dir, rec)
        torch.cuda.empty_cache()


def bench_kernels(out_dir: Path) -> None:
    """Our varlen attention vs torch's flash varlen and SDPA with a block-diagonal mask, at bulk shapes."""
    from triton.testing import do_bench

    from realtime_tts.gpu_worker import kernels
    from realtime_tts.model.attention import sdpa_block_diagonal

    bench_cfg_argmax(out_dir)
    for num_items, cond in ((1, 182), (64, 182), (64, 307)):
        lens = [cond] * num_items + [150] * num_items
        n = sum(lens)
        cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
        q = torch.randn(n, 16, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(n, 8, 128, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(n, 8, 128, device="cuda", dtype=torch.bfloat16)
        flops = 4.0 * sum(x * x for x in lens) * 16 * 128
        rec: dict[str, Any] = {"kind": "attn", "items": num_items, "cond_len": cond, "tokens": n}
        for bm, bn, w, st in ((64, 64, 4, 2), (64, 32, 4, 2), (64, 32, 4, 3), (128, 32, 8, 2), (32, 32, 4, 2)):
            tiles = kernels.attention_tiles(cu, kernels.max_attention_tiles(n, len(lens), bm), bm)
            ms = do_bench(lambda: kernels.varlen_attention(q, k, v, cu, max(lens), tiles=tiles, block_m=bm,
                                                           block_n=bn, num_warps=w, num_stages=st),
                          return_mode="median")
            rec[f"triton_{bm}x{bn}w{w}s{st}_ms"] = round(ms, 4)
            rec[f"triton_{bm}x{bn}w{w}s{st}_tflops"] = round(flops / ms / 1e9, 1)
        # q/k norm + rope: separate kernel then attention, vs fused into the attention kernel
        w = torch.ones(128, device="cuda", dtype=torch.bfloat16)
        cos_t, sin_t = kernels.rope_cos_sin(torch.arange(4096, device="cuda"), 128, 1e6, torch.float32)
        pos = torch.cat([torch.arange(x, device="cuda") for x in lens])
        tiles = kernels.attention_tiles(cu, kernels.max_attention_tiles(n, len(lens), 64), 64)
        cos_n, sin_n = cos_t[pos], sin_t[pos]

        def split() -> None:
            kernels.qk_norm_rope(q, k, w, w, cos_n, sin_n, 1e-6)
            kernels.varlen_attention(q, k, v, cu, max(lens), tiles=tiles, block_n=32, num_stages=3)

        rec["rope_then_attn_ms"] = round(do_bench(split, return_mode="median"), 4)
        rec["rope_then_attn_tflops"] = round(flops / rec["rope_then_attn_ms"] / 1e9, 1)
        rec["rope_fused_attn_ms"] = round(do_bench(lambda: kernels.varlen_attention_rope(
            q, k, v, cu, max(lens), tiles, w, w, pos, cos_t, sin_t, 1e-6), return_mode="median"), 4)
        try:
            bench_attention_variants(rec, q, k, v, cu, lens, pos, cos_t, sin_t, flops)
        except Exception as e:  # noqa: BLE001 - keep the other attention numbers
            rec["variants_err"] = repr(e)[:300]
        try:
            from torch.nn.attention.varlen import varlen_attn
            kr, vr = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
            ms = do_bench(lambda: varlen_attn(q, kr, vr, cu, cu, max(lens), max(lens)), return_mode="median")
            rec["torch_varlen_ms"] = round(ms, 4)
        except Exception as e:  # noqa: BLE001 - optional comparison
            rec["torch_varlen_err"] = repr(e)[:200]
        if n <= 30000:
            ms = do_bench(lambda: sdpa_block_diagonal(q, k, v, cu, max(lens), 128 ** -0.5), return_mode="median")
            rec["sdpa_block_diag_ms"] = round(ms, 4)
        cu0 = torch.tensor([0, cond], dtype=torch.int32, device="cuda")
        ref = kernels.varlen_attention_ref(q[:cond].double(), k[:cond].double(), v[:cond].double(), cu0, cond)
        ours = kernels.varlen_attention(q, k, v, cu, max(lens))[:cond].double()
        rec["rel_err_row0"] = float((ours - ref).norm() / ref.norm())
        emit(out_dir, rec)


# kernels.norm_rope_attention variants beside rope_then_attn (mode, heads per program (None: the GQA group),
# per-head block_m, block_n, warps, stages). q_fused: k-only norm + RoPE, q normalised as its tile loads
# (q_fused_swap: that q tile computed full-width, q_rope_join=False). Measured on the H200 and dropped (session 6,
# bulk run 16 in bench/results/HISTORY.md): lazy softmax rescaling at 32x32/32x64/64x64/32x128 tiles and
# 128/168-register caps, each slower than the q_fused 32x32 default.
ATTN_VARIANTS = [("q_fused", 1, 64, 32, 4, 3), ("q_fused", 1, 64, 64, 4, 2),
                 ("split", None, 32, 32, 4, 3), ("split", None, 64, 32, 8, 3), ("split", None, 64, 64, 8, 2),
                 ("q_fused", None, 32, 32, 4, 3), ("q_fused", None, 32, 64, 4, 2), ("q_fused", None, 32, 64, 4, 3),
                 ("q_fused", None, 64, 32, 4, 3), ("q_fused", None, 64, 32, 8, 3), ("q_fused", None, 64, 64, 8, 2),
                 ("q_fused", None, 64, 64, 8, 3), ("q_fused_swap", None, 32, 64, 4, 3),
                 ("q_fused_swap", None, 64, 64, 8, 2),
                 # not yet measured: wide key blocks (a bulk row of 150-307 tokens in 2-3 blocks instead of 5-10),
                 # and 16-token q tiles (mma.sync, more programs); all build for sm_90 without spills
                 # (32x128 at 4 warps and 32x256 at 8 spill, so they are not listed)
                 ("q_fused", None, 32, 128, 8, 2), ("q_fused", None, 64, 128, 8, 2), ("q_fused", None, 16, 64, 4, 3)]


def bench_attention_variants(rec: dict[str, Any], q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             cu: torch.Tensor, lens: list[int], pos: torch.Tensor, cos_t: torch.Tensor,
                             sin_t: torch.Tensor, flops: float) -> None:
    """Each variant's ms includes its q/k norm + RoPE (as rope_then_attn does); rel_err against the split path
    on the same raw inputs (bf16 on the GPU: the interpreter tests cannot run bf16 dots)."""
    from triton.testing import do_bench

    from realtime_tts.gpu_worker import kernels

    n, d = q.shape[0], q.shape[2]
    w = torch.ones(d, device=q.device, dtype=q.dtype)
    cos_n, sin_n = cos_t[pos], sin_t[pos]
    rec["qk_norm_rope_ms"] = round(do_bench(functools.partial(
        kernels.qk_norm_rope, q, k, w, w, cos_n, sin_n, 1e-6), return_mode="median"), 4)
    for tpp in (1, 2, 4):
        rec[f"k_norm_rope_t{tpp}_ms"] = round(do_bench(functools.partial(
            kernels.head_norm_rope, k, w, pos, cos_t, sin_t, 1e-6, tokens_per_program=tpp), return_mode="median"), 4)
    # reference output: the split path (old kernels) on fresh raw copies
    qw = (1 + 0.2 * torch.randn(d, device=q.device)).to(q.dtype)
    kw = (1 + 0.2 * torch.randn(d, device=q.device)).to(q.dtype)
    q0, k0 = q.clone(), k.clone()
    tiles64 = kernels.attention_tiles(cu, kernels.max_attention_tiles(n, len(lens), 64), 64)
    ref = kernels.norm_rope_attention(q0.clone(), k0.clone(), v, cu, max(lens), tiles64, qw, kw, pos, cos_t,
                                      sin_t, 1e-6, mode="split", heads_per_program=1).float()
    times = {"rope_then_attn": rec["rope_then_attn_ms"]}
    for mode, hp, bm, bn, nw, st in ATTN_VARIANTS:
        name = f"{mode}_h{hp or 'g'}_{bm}x{bn}w{nw}s{st}"
        tiles = kernels.attention_tiles(cu, kernels.max_attention_tiles(n, len(lens), bm), bm)
        opts: dict[str, Any] = {"mode": mode.removesuffix("_swap"), "heads_per_program": hp, "block_m": bm,
                                "block_n": bn, "num_warps": nw, "num_stages": st,
                                "q_rope_join": not mode.endswith("_swap")}
        if mode == "split":  # angles gathered once per forward, as rope_then_attn has them
            opts["angles"] = (cos_n, sin_n)
        try:
            out = kernels.norm_rope_attention(q0.clone(), k0.clone(), v, cu, max(lens), tiles, qw, kw, pos, cos_t,
                                              sin_t, 1e-6, **opts).float()
            rec[name + "_rel_err"] = float((out - ref).norm() / ref.norm())
            ms = do_bench(functools.partial(kernels.norm_rope_attention, q, k, v, cu, max(lens), tiles, w, w, pos,
                                            cos_t, sin_t, 1e-6, **opts), return_mode="median")
        except Exception as e:  # noqa: BLE001 - e.g. a config out of shared memory: rank the rest
            rec[name + "_err"] = repr(e)[:200]
            continue
        rec[name + "_ms"] = round(ms, 4)
        rec[name + "_tflops"] = round(flops / ms / 1e9, 1)
        times[name] = round(ms, 4)
    rec["attn_ranking"] = sorted(times.items(), key=lambda kv: kv[1])[:6]


def our_items(model: Any, mode: str, num: int, dur: float, steps: int) -> list[Any]:
    from realtime_tts.model import ClonePrompt, DecodeParams, prepare

    params = DecodeParams(num_step=steps)
    prompt = None
    if mode == "clone":
        g = torch.Generator().manual_seed(123)
        prompt = ClonePrompt(codes=torch.randint(0, 1024, (8, REF_SECONDS * 25), generator=g),
                             ref_text=make_text(int(2.7 * REF_SECONDS), 99), ref_rms=0.05)
    words = max(3, round(2.7 * dur))
    return [prepare(model, make_text(words, i), language="en", instruct=INSTRUCT if mode == "design" else None,
                    prompt=prompt, duration_s=dur, params=params, seed=i) for i in range(num)]


def pipelined(runner: Any, model: Any, mode: str, num: int, args: argparse.Namespace, num_batches: int) -> float:
    """Steady-state serving of num_batches batches: the host prepares batch i+1 and copies it into device
    slots while the GPU replays and decodes batch i (the runner never waits for the device). With
    args.codec_stream the codec decodes batch i on its own stream while batch i+1's steps run, as the worker's
    decode thread does (gpu_worker/loop.py); else on the steps' stream, between the batches. → wall seconds,
    including the final copy of every waveform to pinned host memory."""
    frames = round(args.dur * 25)
    # Pinned outputs allocated ahead: cudaHostAlloc inside the timed loop could synchronise the device.
    hosts = [torch.empty(num, 1, 960 * frames, pin_memory=True) for _ in range(num_batches)]
    decode_stream = torch.cuda.Stream() if args.codec_stream else torch.cuda.current_stream()  # type: ignore[no-untyped-call]
    sync()
    t0 = time.perf_counter()
    for i in range(num_batches):
        items = our_items(model, mode, num, args.dur, args.steps)
        grids = runner.enqueue(items)
        assert grids is not None and items[0].num_frames == frames  # equal-length items: one codec call
        ready = torch.cuda.Event()  # type: ignore[no-untyped-call]
        ready.record()  # the grids are complete (copied out of their slots) on the steps' stream
        decode_stream.wait_event(ready)
        with torch.cuda.stream(decode_stream), torch.inference_mode():
            for grid in grids:  # made on the steps' stream, read here: not to be reused before this reads them
                grid.record_stream(decode_stream)
            waves = model.codec.model.decode(torch.stack(grids)).audio_values  # [B, 1, 960·T]
            hosts[i].copy_(waves, non_blocking=True)
    sync()  # the whole device: both streams
    return time.perf_counter() - t0


def pick_attention(out_dir: Path) -> tuple[str, str, int]:
    """--attention auto: the bulk attention variant with the least summed time over this run's two 64-item
    attention shapes (design and clone prefixes), among rope_then_attn (the old path) and the ATTN_VARIANTS the
    runner can run (not the _swap ones), with a bf16 error against the old path under 1e-2.
    → (mode, "block_m,block_n,warps,stages", heads per program (0: the GQA group))."""
    records = [json.loads(line) for line in (out_dir / "omnivoice_bench.jsonl").read_text().splitlines()]
    shapes = [r for r in records if r.get("kind") == "attn" and r.get("items") == 64]
    candidates = {"rope_then_attn": ("split", "64,32,4,3", 1)}
    for mode, hp, bm, bn, nw, st in ATTN_VARIANTS:
        if not mode.endswith("_swap"):
            candidates[f"{mode}_h{hp or 'g'}_{bm}x{bn}w{nw}s{st}"] = (mode, f"{bm},{bn},{nw},{st}", hp or 0)

    def total_ms(name: str) -> float:
        if not shapes or any(f"{name}_ms" not in r and name != "rope_then_attn" for r in shapes):
            return math.inf
        if any(r.get(f"{name}_rel_err", 0.0) > 1e-2 for r in shapes):
            return math.inf
        return sum(r["rope_then_attn_ms" if name == "rope_then_attn" else f"{name}_ms"] for r in shapes)

    best = min(candidates, key=total_ms)
    emit(out_dir, {"kind": "attention_pick", "variant": best, "ms_sum": total_ms(best),
                   "old_ms_sum": total_ms("rope_then_attn")})
    return candidates[best]


def bench_ours(args: argparse.Namespace, ckpt: Path, out_dir: Path) -> None:
    from realtime_tts.gpu_worker.kernels import use_fused_codec, use_fused_snake
    from realtime_tts.gpu_worker.runner import StepRunner
    from realtime_tts.model import OmniVoiceModel, decoding

    t0 = time.perf_counter()
    model = OmniVoiceModel.from_pretrained(ckpt, dtype=torch.bfloat16, device="cuda")
    if args.attention == "auto":
        args.attention, args.attention_block, args.attention_heads = pick_attention(out_dir)
    runner = StepRunner(model, precision=args.precision, attention=args.attention,
                        attention_block=tuple(int(v) for v in args.attention_block.split(",")),  # type: ignore[arg-type]
                        attention_heads=args.attention_heads or None,
                        swiglu_gemm_min_tokens=args.swiglu_gemm_min_tokens)
    # The bulk table decodes with the fused Snake kernel only under --fused-snake, and with the fused decoder
    # epilogues only under --fused-codec too (set here either way, whatever StepRunner chose), so the table
    # states which codec ran.
    use_fused_snake(model.codec.model, enabled=args.fused_snake)
    use_fused_codec(model.codec.model, enabled=args.fused_snake and args.fused_codec,
                    channels_last=args.codec_channels_last,
                    fused_units=args.fused_snake and args.fused_codec and args.codec_channels_last
                    and args.codec_units)
    emit(out_dir, {"kind": "load", "impl": "ours", "load_s": round(time.perf_counter() - t0, 2)})
    check_fused(model, runner, out_dir, args)
    for mode in args.modes.split(","):
        for num in [int(b) for b in args.batches.split(",")]:
            if time.time() - T_START > args.budget_s * 0.55:
                emit(out_dir, {"kind": "skip", "impl": "ours", "mode": mode, "B": num})
                continue
            items = our_items(model, mode, num, args.dur, args.steps)
            batch = decoding.pack([decoding.ItemState.start(it, "cuda") for it in items], "cuda")
            flops = step_flops(model, batch) * args.steps
            tc = time.perf_counter()
            codes = runner.run_graphed(items)  # captures the bucket's graph on first use
            if codes is None:
                emit(out_dir, {"kind": "miss", "impl": "ours", "mode": mode, "B": num,
                               "stats": runner.stats.as_dict()})
                continue
            model.codec.decode(codes)
            sync()
            first_s = time.perf_counter() - tc
            walls, loops = [], []
            for _ in range(args.reps):
                sync()
                t1 = time.perf_counter()
                items = our_items(model, mode, num, args.dur, args.steps)
                t_prep = time.perf_counter()
                codes = runner.run_graphed(items)
                sync()
                t_loop = time.perf_counter()
                waves = model.codec.decode(codes)
                sync()
                walls.append(time.perf_counter() - t1)
                loops.append(t_loop - t_prep)
            wall, loop = min(walls), min(loops)
            pipe_s = pipelined(runner, model, mode, num, args, args.pipeline) if args.pipeline else None
            emit(out_dir, {
                "kind": "gen", "impl": "ours", "mode": mode, "B": num, "dur_s": args.dur, "num_step": args.steps,
                "precision": args.precision, "attention": f"{args.attention}/{args.attention_block}/"
                                                          f"{args.attention_heads}",
                "tokens_per_step": batch.num_tokens, "max_seqlen": batch.max_seqlen,
                "wall_s": round(wall, 4), "loop_s": round(loop, 4), "per_step_ms": round(1000 * loop / args.steps, 3),
                "decode_and_prep_s": round(wall - loop, 4), "xrt": round(num * args.dur / wall, 1),
                "xrt_pipelined": round(args.pipeline * num * args.dur / pipe_s, 1) if pipe_s else None,
                "mfu_loop": round(flops / loop / 1e12 / CARD_TFLOPS, 3),
                "tflops_loop": round(flops / loop / 1e12, 1), "first_call_s": round(first_s, 2),
                "out_samples": int(sum(len(w) for w in waves)), "graph": runner.stats.as_dict(),
                "fused_snake": args.fused_snake,
                "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1)})
    try:
        bench_codec(model, out_dir, args)
    except Exception:  # noqa: BLE001 - keep the latency numbers below
        import traceback
        emit(out_dir, {"kind": "error", "stage": "codec", "err": traceback.format_exc()[-3000:]})  # bench_codec
        # restored the codec's Snake setting in its finally
    # Single utterance on an idle engine: the worker's path (step() per step, re-using the graph).
    items = our_items(model, "design", 1, args.dur, args.steps)
    runner.run(items)  # warm
    def utterance_s(run: Any) -> float:
        """One 6 s design utterance end to end: prepare, steps through `run`, codec decode."""
        sync()
        t1 = time.perf_counter()
        model.codec.decode(run(our_items(model, "design", 1, args.dur, args.steps)))
        sync()
        return time.perf_counter() - t1

    lat, lat_graphed = [], []
    for _ in range(5):
        lat.append(utterance_s(runner.run))
        lat_graphed.append(utterance_s(runner.run_graphed))
    emit(out_dir, {"kind": "latency", "impl": "ours", "mode": "design", "dur_s": args.dur, "num_step": args.steps,
                   "step_path_ms_median": round(1000 * statistics.median(lat), 1),
                   "step_path_ms_min": round(1000 * min(lat), 1),
                   "graphed_ms_median": round(1000 * statistics.median(lat_graphed), 1),
                   "graphed_ms_min": round(1000 * min(lat_graphed), 1), "graph": runner.stats.as_dict()})
    if args.profile:
        profile_ours(model, runner, out_dir, args)
    del runner, model
    torch.cuda.empty_cache()


def bench_codec(model: Any, out_dir: Path, args: argparse.Namespace, num: int = 128) -> None:
    """Eager codec decode of one batch of `num` random dur-second grids with transformers' Snake1d modules, with
    the fused Snake kernel, with the fused decoder too (use_fused_codec: conv bias, residual add and Snake in one
    pass), and fused with cudnn.benchmark (a candidate: cuDNN's timed algorithm choice may
    avoid the NCHW<->NHWC conversions the heuristics' TF32 kernels pay), and the fused decoder channels-last end
    to end (fused_codec_cl: cuDNN's NHWC kernels with no conversions), and that with each residual unit of <= 64
    channels as one Triton kernel (fused_codec_cl_units; at T_BLOCK 64/4 warps and 128/8 warps for every channel
    count it ran within 1 ms of dac_units' launch table on the H200, bulk runs 19/20 in bench/results/HISTORY.md), and that with
    cudnn.benchmark (cuDNN's timed choice for the wider channels-last convs): ms each (median of 3, synced), max
    abs difference of the waveforms to the stock ones. Leaves the codec as --fused-snake set it, and its decoder
    as it found it."""
    from realtime_tts.gpu_worker.kernels import use_fused_snake
    from realtime_tts.gpu_worker.kernels.dac_decoder import (
        fused_codec_state,
        fused_units_state,
        use_fused_codec,
    )

    g = torch.Generator().manual_seed(5)
    grids = torch.randint(0, 1024, (num, 8, round(args.dur * 25)), generator=g).to(model.codec.device)  # [B, 8, T]
    rec: dict[str, Any] = {"kind": "codec", "B": num, "dur_s": args.dur}
    waves = {}
    cudnn_benchmark = torch.backends.cudnn.benchmark
    codec_was_fused, codec_was_cl = fused_codec_state(model.codec.model)
    codec_had_units = fused_units_state(model.codec.model)
    try:
        with torch.inference_mode():
            for name, fused, timed_algos in (("stock", False, False), ("fused", True, False),
                                             ("fused_codec", True, False), ("fused_cudnn_benchmark", True, True),
                                             ("fused_codec_cl", True, False), ("fused_codec_cl_units", True, False),
                                             ("fused_codec_cl_units_cudnn_benchmark", True, True)):
                rec[f"num_switched_{name}"] = use_fused_snake(model.codec.model, enabled=fused)
                units = name.startswith("fused_codec_cl_units")
                rec[f"num_switched_codec_{name}"] = use_fused_codec(
                    model.codec.model, enabled=name.startswith("fused_codec"),
                    channels_last=name.startswith("fused_codec_cl"), fused_units=units)
                torch.backends.cudnn.benchmark = timed_algos
                times = []
                for _ in range(4):  # the first: warm-up (cuDNN algorithms, Triton compile)
                    sync()
                    t1 = time.perf_counter()
                    waves[name] = model.codec.model.decode(grids).audio_values  # [B, 1, 960·frames]
                    sync()
                    times.append(time.perf_counter() - t1)
                rec[f"{name}_ms"] = round(1000 * statistics.median(times[1:]), 1)
                if name != "stock":
                    rec[f"{name}_max_abs_diff"] = float((waves[name] - waves["stock"]).abs().max())
            rec["max_abs_stock"] = float(waves["stock"].abs().max())
    finally:
        torch.backends.cudnn.benchmark = cudnn_benchmark
        use_fused_snake(model.codec.model, enabled=args.fused_snake)
        use_fused_codec(model.codec.model, enabled=codec_was_fused, channels_last=codec_was_cl,
                        fused_units=codec_had_units)
    del waves
    torch.cuda.empty_cache()
    emit(out_dir, rec)


def check_fused(model: Any, runner: Any, out_dir: Path, args: argparse.Namespace) -> None:
    """At full size in bf16: the fused backbone (each attention mode) against the model's eager backbone, and
    one runner step against the model's step (token agreement over the positions either reveals)."""
    from realtime_tts.gpu_worker.runner import FusedBackbone
    from realtime_tts.model import decoding

    items = our_items(model, "design", 4, args.dur, args.steps)
    batch = decoding.pack([decoding.ItemState.start(it, "cuda") for it in items], "cuda")
    rec: dict[str, Any] = {"kind": "check", "B": 4, "precision": runner.precision}
    with torch.inference_mode():
        embeds = model.embed(batch.ids, batch.audio_mask)
        ref = model.llm(embeds, batch.positions, batch.cu_seqlens, batch.max_seqlen, model.attention).float()
        outs = {}
        for mode in ("q_fused", "split", "fused", "q_fused_gemms"):
            # q_fused_gemms: q_fused with the MLP's gate/up GEMM + SwiGLU as one Triton kernel
            outs[mode] = FusedBackbone(model, residual_dtype=runner.fused.residual_dtype,
                                       attention=mode.removesuffix("_gemms"),
                                       swiglu_gemm_min_tokens=1 if mode == "q_fused_gemms" else 0)(
                embeds, batch.positions, batch.cu_seqlens, batch.max_seqlen).float()
            rec[f"hidden_rel_err_{mode}"] = float((outs[mode] - ref).norm() / ref.norm())
        rec["gemms_vs_cublas_rel_err"] = float((outs["q_fused_gemms"] - outs["q_fused"]).norm()
                                               / outs["q_fused"].norm())
        tokens, _ = runner.forward_step(batch)
        before = batch.tokens.clone()
        decoding.step_packed(model, batch)
        changed = (tokens != before) | (batch.tokens != before)
        rec["step_token_agreement"] = float((tokens == batch.tokens)[changed].float().mean())
        rec["step_positions_revealed"] = int(changed.sum())
    emit(out_dir, rec)


def profile_ours(model: Any, runner: Any, out_dir: Path, args: argparse.Namespace) -> None:
    """Kernel time tables at B=args.profile_batch design: one eager fused step (what the graph replays), the
    codec decode of that many 6 s grids, and a whole batch's graph replays (does the graph run the eager
    step's kernels at the same speed?)."""
    from torch.profiler import ProfilerActivity, profile

    from realtime_tts.model import decoding

    num = args.profile_batch
    items = our_items(model, "design", num, args.dur, args.steps)
    batch = decoding.pack([decoding.ItemState.start(it, "cuda") for it in items], "cuda")
    grids = torch.stack([batch.tokens[i, :, :items[i].num_frames].clamp(max=1023) for i in range(num)])
    tables = []
    def replayed() -> None:  # 32 graph replays, as the bulk table runs them (admission included)
        runner.enqueue(our_items(model, "design", num, args.dur, args.steps))

    for name, work in (("step", lambda: runner.forward_step(batch)),
                       ("codec decode", lambda: model.codec.model.decode(grids)),
                       (f"{args.steps} graph replays", replayed)):
        with torch.inference_mode():
            work()
            sync()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
                work()
                sync()
        tables.append(f"## {name}, B={num} design {args.dur} s\n\n"
                      + prof.key_averages().table(sort_by="cuda_time_total", row_limit=30, max_name_column_width=70))
        if name == "codec decode":  # which torch ops (and shapes) its kernels come from
            tables.append(f"## {name} by op and input shape\n\n" + prof.key_averages(group_by_input_shape=True).table(
                sort_by="self_cuda_time_total", row_limit=25, max_name_column_width=40, max_shapes_column_width=80))
    (out_dir / "omnivoice_profile.txt").write_text("\n\n".join(tables))


def bench_reference(args: argparse.Namespace, ckpt: Path, out_dir: Path) -> None:
    from omnivoice import OmniVoice, VoiceClonePrompt

    t0 = time.perf_counter()
    model = OmniVoice.from_pretrained(str(ckpt), dtype=torch.bfloat16, device_map="cuda")
    model.eval()
    emit(out_dir, {"kind": "load", "impl": "reference", "load_s": round(time.perf_counter() - t0, 2)})
    words = max(3, round(2.7 * args.dur))
    for mode in args.modes.split(","):
        for num in [int(b) for b in args.ref_batches.split(",")]:
            if time.time() - T_START > args.budget_s - 25:
                emit(out_dir, {"kind": "skip", "impl": "reference", "mode": mode, "B": num})
                continue
            kw: dict[str, Any] = dict(text=[make_text(words, i) for i in range(num)], language="en",
                                      duration=float(args.dur), num_step=args.steps)
            if mode == "design":
                kw["instruct"] = INSTRUCT
            else:
                g = torch.Generator().manual_seed(123)
                ref = torch.randint(0, 1024, (8, REF_SECONDS * 25), generator=g).cuda()
                kw["voice_clone_prompt"] = [VoiceClonePrompt(ref_audio_tokens=ref, ref_text=make_text(
                    int(2.7 * REF_SECONDS), 99), ref_rms=0.05)] * num
            model.generate(**{**kw, "num_step": 4})  # warm-up
            walls = []
            for rep in range(args.reps):
                torch.manual_seed(rep)
                sync()
                t1 = time.perf_counter()
                model.generate(**kw)
                sync()
                walls.append(time.perf_counter() - t1)
            wall = min(walls)
            emit(out_dir, {"kind": "gen", "impl": "reference", "mode": mode, "B": num, "dur_s": args.dur,
                           "num_step": args.steps, "wall_s": round(wall, 4), "xrt": round(num * args.dur / wall, 1)})
    del model
    torch.cuda.empty_cache()


def write_report(args: argparse.Namespace, out_dir: Path, env: dict[str, Any]) -> str:
    gens = [r for r in RECORDS if r["kind"] == "gen"]
    fused_codec = args.fused_snake and args.fused_codec
    codec_desc = ("fused Snake kernel" if args.fused_snake else "stock transformers Snake1d") + "".join(
        part for part, on in ((" with the fused decoder epilogues", fused_codec),
                              (", channels-last", fused_codec and args.codec_channels_last),
                              (", narrow residual units as one kernel each",
                               fused_codec and args.codec_channels_last and args.codec_units)) if on)
    lines = [f"# OmniVoice engine vs reference on {env['device']} ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
             "", f"Command: `python bench/omnivoice_bench.py {' '.join(sys.argv[1:])}`", "",
             f"Versions: torch {env['torch']}, CUDA {env['cuda']}, triton {env['triton']}, transformers "
             f"{env['transformers']}, python {env['python']}. Full-size random checkpoint (realtime_tts.model."
             f"checkpoint, 612.6 M LLM params) with a word-level bench tokenizer; bf16; {args.steps} steps; "
             f"{args.dur:g} s clips; xRT = seconds of audio per wall second (diffusion + codec decode + host "
             f"prep); MFU = useful FLOPs of the diffusion loop / {CARD_TFLOPS:g} TFLOP/s.", "",
             f"Our precision (--precision): {args.precision} (fp32: fp32 residual stream, embedding and final norm, "
             "TF32 audio head, fp32 logits; reference: all of those in bf16 as the reference package computes "
             "them at dtype=bfloat16, scoring in fp32).", "",
             "xRT pipelined: several batches back to back with host prepare/pack overlapping the GPU (how a busy "
             "worker runs); xRT: one batch alone, everything serial.", "",
             ("Pipelined codec (--codec-stream): " + ("on its own CUDA stream beside the next batch's steps, as "
              "the worker's decode thread runs it." if args.codec_stream else "on the steps' stream, between "
              "batches.")), "",
             f"Codec in this table: {codec_desc} (--fused-snake, --fused-codec, --codec-channels-last, "
             "--codec-units).", "",
             f"Attention (--attention, --attention-block, --attention-heads): {args.attention}, block "
             f"{args.attention_block}, {args.attention_heads or 'GQA group'} q head(s) per program.", "",
             f"MLP gate/up + SwiGLU (--swiglu-gemm-min-tokens {args.swiglu_gemm_min_tokens}): "
             + ("cuBLAS then silu_mul." if args.swiglu_gemm_min_tokens <= 0 else
                f"one Triton GEMM with SwiGLU in its epilogue for steps of >= {args.swiglu_gemm_min_tokens} "
                "tokens."), "",
             "| impl | mode | B | wall s | xRT | xRT pipelined | per step ms | loop TFLOP/s | MFU (loop) | graph hits/misses |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in gens:
        g = r.get("graph", {})
        lines.append(f"| {r['impl']} | {r['mode']} | {r['B']} | {r['wall_s']} | {r['xrt']} | {r.get('xrt_pipelined') or ''} | "
                     f"{r.get('per_step_ms', '')} | {r.get('tflops_loop', '')} | {r.get('mfu_loop', '')} | "
                     f"{str(g.get('graph_hits', '')) + '/' + str(g.get('graph_misses', '')) if g else ''} |")
    for r in RECORDS:
        if r["kind"] == "latency":
            lines += ["", f"Single {r['dur_s']} s design utterance, idle engine, {r['num_step']} steps, incl. "
                          f"prepare + codec decode: step() path median {r['step_path_ms_median']} ms (min "
                          f"{r['step_path_ms_min']}); chained graph replay median {r['graphed_ms_median']} ms "
                          f"(min {r['graphed_ms_min']})."]
        if r["kind"] == "codec":
            variants = [("fused", "fused Snake kernel"), ("fused_codec", "fused decoder epilogues"),
                        ("fused_codec_cl", "fused decoder epilogues, channels-last"),
                        ("fused_codec_cl_units", "channels-last, residual units <= 64 ch. as one kernel"),
                        ("fused_codec_cl_units_cudnn_benchmark", "the same with cudnn.benchmark"),
                        ("fused_cudnn_benchmark", "fused Snake with cudnn.benchmark")]
            timed = [f"{label} {r[name + '_ms']} ms (max abs waveform difference {r[name + '_max_abs_diff']:.3g})"
                     for name, label in variants if name + "_ms" in r]
            lines += ["", f"Codec decode, B={r['B']} random {r['dur_s']:g} s grids, eager, median of 3: stock Snake1d "
                          f"{r['stock_ms']} ms; " + "; ".join(timed) + f"; stock peak {r['max_abs_stock']:.3g}."]
        if r["kind"] == "attn":
            lines += ["", "Attention " + json.dumps({k: v for k, v in r.items() if k not in ('kind', 't_s')})]
    text = "\n".join(lines) + "\n"
    (out_dir / "omnivoice_bench.md").write_text(text)
    return text


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out-dir", default=os.environ.get("OUT", "bench/results"))
    p.add_argument("--ckpt", default="/tmp/omnivoice-full")
    p.add_argument("--batches", default="1,16,64,128")
    p.add_argument("--ref-batches", default="1,64")
    p.add_argument("--modes", default="design,clone")
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--dur", type=float, default=6.0)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--budget-s", type=float, default=540)
    p.add_argument("--no-ref", action="store_true")
    p.add_argument("--no-kernels", action="store_true")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--profile-batch", type=int, default=128)
    p.add_argument("--pipeline", type=int, default=3, help="batches in the steady-state pipelined run (0: off)")
    p.add_argument("--precision", choices=("fp32", "reference"), default="reference",
                   help="StepRunner(precision=...): reference = bf16 residual stream and audio head, as omnivoice")
    p.add_argument("--attention", choices=("split", "q_fused", "auto"), default="q_fused",
                   help="StepRunner(attention=...): split = q/k norm+rope kernel then attention; "
                        "q_fused = k-only norm+rope, q normalised as the attention kernel loads it; auto = the "
                        "fastest variant of this run's kernel stage (sets block and heads too)")
    p.add_argument("--attention-block", default="32,32,4,3",
                   help="attention block_m,block_n,num_warps,num_stages (block_m per q head)")
    p.add_argument("--attention-heads", type=int, default=0, help="q heads per attention program; 0 = the GQA group")
    p.add_argument("--swiglu-gemm-min-tokens", type=int, default=OmniVoiceConfig.swiglu_gemm_min_tokens,
                   help="steps of at least this many tokens fuse the MLP's gate/up GEMM and SwiGLU (0: never; "
                        "default: the server's)")
    p.add_argument("--codec-stream", action=argparse.BooleanOptionalAction, default=True,
                   help="pipelined runs decode on their own CUDA stream beside the next batch's steps, as the "
                        "worker does (--no-codec-stream: between the batches, on the steps' stream)")
    p.add_argument("--fused-snake", action=argparse.BooleanOptionalAction, default=True,
                   help="the bulk table's codec uses the fused Snake kernel (--no-fused-snake: transformers' Snake1d)")
    p.add_argument("--fused-codec", action=argparse.BooleanOptionalAction, default=True,
                   help="with --fused-snake, the decoder's conv bias and residual adds ride in the Snake passes")
    p.add_argument("--codec-channels-last", action=argparse.BooleanOptionalAction, default=CODEC_CHANNELS_LAST,
                   help="with --fused-codec, the decoder's activations in channels-last memory (default: the "
                        "runner's)")
    p.add_argument("--codec-units", action=argparse.BooleanOptionalAction, default=CODEC_UNITS,
                   help="with --codec-channels-last, residual units of <= 64 channels as one Triton kernel each "
                        "(default: the runner's)")
    args = p.parse_args()
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    import transformers
    import triton

    env = {"kind": "env", "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "cuda": torch.version.cuda, "triton": triton.__version__, "transformers": transformers.__version__,
           "python": platform.python_version(), "argv": sys.argv[1:]}
    emit(out_dir, env)
    ckpt = Path(args.ckpt)
    if not (ckpt / "model.safetensors").exists():
        from realtime_tts.model.checkpoint import build_random_checkpoint

        t0 = time.perf_counter()
        build_random_checkpoint(ckpt, size="full", seed=0, device="cuda")
        write_word_tokenizer(ckpt)
        emit(out_dir, {"kind": "checkpoint", "build_s": round(time.perf_counter() - t0, 1)})
    stages = [("kernels", lambda: None if args.no_kernels else bench_kernels(out_dir)),
              ("ours", lambda: bench_ours(args, ckpt, out_dir)),
              ("reference", lambda: None if args.no_ref else bench_reference(args, ckpt, out_dir))]
    for name, fn in stages:
        try:
            fn()
        except Exception:  # noqa: BLE001 - keep the other stages' numbers
            import traceback
            emit(out_dir, {"kind": "error", "stage": name, "err": traceback.format_exc()[-3000:]})
    print(write_report(args, out_dir, env))


if __name__ == "__main__":
    main()
