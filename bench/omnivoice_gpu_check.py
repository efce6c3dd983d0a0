"""GPU check of our OmniVoice implementation at full size: bf16 vs fp32 token agreement for a fixed seed,
and the wall time of one 6 s utterance. Writes a JSON results file (command, machine, versions, date).

    python bench/omnivoice_gpu_check.py --ckpt DIR [--build] [--size full] --out FILE.json

--build writes a random full-size checkpoint into DIR first (drawn on the GPU). Agreement is reported two
ways: free-running (each precision decodes on its own; one early flip changes every later step's input, so
this compounds) and teacher-forced (at every step both precisions score the SAME fp32 trajectory's input;
the decisions compared are the positions revealed at that step).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from realtime_tts.model import ClonePrompt, DecodeParams, ItemState, OmniVoiceModel, pack, step_packed
from realtime_tts.model.checkpoint import build_random_checkpoint
from realtime_tts.model.decoding import PackedBatch
from realtime_tts.model.decoding import run as ov_run
from realtime_tts.model.sequence import prepare as ov_prepare

TEXT_6S = ("The morning light spreads across the quiet valley, and people walk slowly toward the market, "
           "carrying bread.")


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def make_items(model: OmniVoiceModel, prompt: ClonePrompt, num_step: int) -> list:
    p = DecodeParams(num_step=num_step)
    return [
        ov_prepare(model, TEXT_6S, language="en", instruct="female, young adult, moderate pitch", duration_s=6.0,
                      params=p, seed=1234),
        ov_prepare(model, TEXT_6S, language="en", duration_s=6.0, params=p, seed=99),
        ov_prepare(model, TEXT_6S, language="en", prompt=prompt, duration_s=6.0, params=p, seed=7),
        ov_prepare(model, "A shorter one, three seconds.", language="en", duration_s=3.0, params=p, seed=5),
    ]


def clone_batch(batch: PackedBatch) -> PackedBatch:
    return dataclasses.replace(batch, ids=batch.ids.clone(), tokens=batch.tokens.clone(), step=batch.step.clone())


@torch.inference_mode()
def cfg_margin(model: OmniVoiceModel, batch: PackedBatch) -> torch.Tensor:
    """fp32 gap between the best and second-best CFG log-prob at every target position [B, 8, Tmax]."""
    hidden = model.hidden(batch.ids, batch.audio_mask, batch.positions, batch.cu_seqlens, batch.max_seqlen)
    c = torch.log_softmax(model.head(hidden[batch.cond_index]).permute(0, 2, 1, 3), dim=-1)
    u = torch.log_softmax(model.head(hidden[batch.uncond_index]).permute(0, 2, 1, 3), dim=-1)
    g = batch.guidance[:, None, None, None]
    lp = torch.log_softmax(c + g * (c - u), dim=-1)
    lp[..., model.mask_id] = -float("inf")
    top2 = lp.topk(2, dim=-1).values
    return top2[..., 0] - top2[..., 1]


def teacher_forced(m32: OmniVoiceModel, m16: OmniVoiceModel, items: list) -> dict:
    """Both precisions score the fp32 trajectory's inputs at every step; compare the step's reveals."""
    states = [ItemState.start(it, m32.device) for it in items]
    batch = pack(states, m32.device)
    agree = total = token_diff = position_diff = 0
    per_step, margins_all, margins_diff = [], [], []
    for _ in range(max(len(it.reveal) for it in items)):
        before = batch.tokens.clone()
        other = clone_batch(batch)
        margin = cfg_margin(m32, batch)
        step_packed(m32, batch)
        step_packed(m16, other)
        new32, new16 = batch.tokens != before, other.tokens != before
        new = new32 | new16
        same = (batch.tokens == other.tokens) & new
        both = new32 & new16
        token_diff += int((both & (batch.tokens != other.tokens)).sum())
        position_diff += int((new32 ^ new16).sum())
        margins_all.append(margin[new32].float().cpu())
        margins_diff.append(margin[both & (batch.tokens != other.tokens)].float().cpu())
        a, n = int(same.sum()), int(new.sum())
        agree, total = agree + a, total + n
        per_step.append(round(a / max(n, 1), 4))
    m_all, m_diff = torch.cat(margins_all), torch.cat(margins_diff)
    return {"agreement": agree / total, "positions": total, "token_choice_differs": token_diff,
            "position_choice_differs": position_diff, "per_step": per_step,
            "fp32_margin_median_all_reveals": round(float(m_all.median()), 5),
            "fp32_margin_median_where_token_differs": round(float(m_diff.median()), 5) if m_diff.numel() else None,
            "fp32_margin_max_where_token_differs": round(float(m_diff.max()), 5) if m_diff.numel() else None,
            "share_of_reveals_with_margin_below_that_max": round(float((m_all <= float(m_diff.max())).float().mean()), 4)
            if m_diff.numel() else None}


def reference_comparison(ckpt: str, m32: OmniVoiceModel, m16: OmniVoiceModel, prompt: ClonePrompt,
                         num_step: int) -> dict:
    """The reference package at full size on the same GPU: its fp32 codes vs ours (noise='reference' draws
    the global RNG in its order), and its own bf16-vs-fp32 agreement as the yardstick for ours. It cannot
    batch clone with non-clone items, so two batches: [design, auto, 3 s] and [clone]."""
    import warnings
    warnings.simplefilter("ignore")
    from omnivoice import OmniVoice, OmniVoiceGenerationConfig, VoiceClonePrompt

    dev = m32.device
    cfg = OmniVoiceGenerationConfig(num_step=num_step)
    texts = [TEXT_6S, TEXT_6S, "A shorter one, three seconds."]
    kw_a = {"text": texts, "language": "en", "instruct": ["female, young adult, moderate pitch", None, None],
            "duration": [6.0, 6.0, 3.0]}
    ref_prompt = VoiceClonePrompt(ref_audio_tokens=prompt.codes.to(dev), ref_text=prompt.ref_text,
                                  ref_rms=prompt.ref_rms)
    kw_b = {"text": [TEXT_6S], "language": "en", "voice_clone_prompt": [ref_prompt], "duration": [6.0]}

    def ref_codes(model: object, seed: int) -> list:
        out = []
        for i, kw in enumerate((kw_a, kw_b)):
            torch.manual_seed(seed + i)
            out += [c.cpu() for c in model._generate_iterative(model._preprocess_all(**kw), cfg)]
        return out

    def our_codes(model: OmniVoiceModel, seed: int) -> list:
        p = DecodeParams(num_step=num_step)
        a = [ov_prepare(model, TEXT_6S, language="en", instruct="female, young adult, moderate pitch",
                           duration_s=6.0, params=p),
             ov_prepare(model, TEXT_6S, language="en", duration_s=6.0, params=p),
             ov_prepare(model, texts[2], language="en", duration_s=3.0, params=p)]
        b = [ov_prepare(model, TEXT_6S, language="en", prompt=prompt, duration_s=6.0, params=p)]
        torch.manual_seed(seed)
        out = ov_run(model, a, noise="reference")
        torch.manual_seed(seed + 1)
        return out + ov_run(model, b, noise="reference")

    def agree(x: list, y: list) -> float:
        return sum(int((a == b).sum()) for a, b in zip(x, y)) / sum(a.numel() for a in x)

    res = {}
    r32 = OmniVoice.from_pretrained(ckpt, dtype=torch.float32, device_map=str(dev))
    ref32 = ref_codes(r32, 100)
    ours32 = our_codes(m32, 100)
    res["ours_fp32_vs_reference_fp32"] = agree(ours32, ref32)
    res["ours_fp32_vs_reference_fp32_per_item"] = [round(float((a == b).float().mean()), 4) for a, b in zip(ours32, ref32)]
    del r32
    torch.cuda.empty_cache()
    r16 = OmniVoice.from_pretrained(ckpt, dtype=torch.bfloat16, device_map=str(dev))
    ref16 = ref_codes(r16, 100)
    res["reference_bf16_vs_reference_fp32"] = agree(ref16, ref32)
    res["ours_bf16_vs_reference_fp32"] = agree(our_codes(m16, 100), ref32)
    res["ours_bf16_vs_ours_fp32_same_noise"] = agree(our_codes(m16, 100), ours32)
    return res


def time_one(model: OmniVoiceModel, num_step: int, reps: int) -> dict:
    walls, loops = [], []
    for _ in range(reps + 1):  # first run warms kernels and allocator
        sync()
        t0 = time.perf_counter()
        item = ov_prepare(model, TEXT_6S, language="en", instruct="female, young adult, moderate pitch",
                             duration_s=6.0, params=DecodeParams(num_step=num_step), seed=1)
        codes = ov_run(model, [item])
        sync()
        t1 = time.perf_counter()
        wave = model.decode(codes)[0]
        sync()
        t2 = time.perf_counter()
        walls.append(t2 - t0)
        loops.append(t1 - t0)
    walls, loops = walls[1:], loops[1:]
    return {"num_step": num_step, "audio_s": len(wave) / 24000, "wall_s_median": round(statistics.median(walls), 4),
            "wall_s_all": [round(w, 4) for w in walls], "prepare_plus_steps_s_median": round(statistics.median(loops), 4),
            "per_step_ms": round(1000 * statistics.median(loops) / num_step, 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--build", action="store_true")
    ap.add_argument("--size", default="full", choices=["tiny", "full"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--num-step", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    res: dict = {"command": " ".join([Path(sys.executable).name] + sys.argv), "date": datetime.datetime.now(
        datetime.UTC).isoformat(timespec="seconds"), "python": platform.python_version(),
        "torch": torch.__version__, "device": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu"}
    import transformers
    res["transformers"] = transformers.__version__
    if args.build:
        res["build"] = build_random_checkpoint(args.ckpt, size=args.size, seed=0, device=dev)
        print("BUILD", res["build"], flush=True)
    t0 = time.perf_counter()
    m32 = OmniVoiceModel.from_pretrained(args.ckpt, dtype=torch.float32, device=dev)
    m16 = OmniVoiceModel.from_pretrained(args.ckpt, dtype=torch.bfloat16, device=dev, load_codec=False)
    m16.codec = m32.codec
    sync()
    res["load_s_both"] = round(time.perf_counter() - t0, 2)
    res["llm_params"] = sum(p.numel() for p in m32.parameters())
    # A clone prompt through the real encoder (5 s of noise at 16 kHz, resampled to 24 kHz).
    g = torch.Generator().manual_seed(0)
    prompt = m32.encode_prompt((torch.randn(80000, generator=g) * 0.05).numpy(), 16000, "A reference sentence.")
    res["prompt_frames"] = int(prompt.codes.shape[1])

    items32 = make_items(m32, prompt, args.num_step)
    items16 = make_items(m16, prompt, args.num_step)
    c32 = ov_run(m32, items32)
    c16 = ov_run(m16, items16)
    eq = sum(int((a == b).sum()) for a, b in zip(c32, c16))
    n = sum(a.numel() for a in c32)
    res["free_running"] = {"agreement": eq / n, "positions": n,
                           "per_item": [round(float((a == b).float().mean()), 4) for a, b in zip(c32, c16)]}
    res["teacher_forced"] = teacher_forced(m32, m16, items32)
    rerun = ov_run(m16, items16)
    res["bf16_deterministic"] = all(torch.equal(a, b) for a, b in zip(c16, rerun))
    print(f"AGREEMENT free-running {res['free_running']['agreement']:.4f} "
          f"teacher-forced {res['teacher_forced']['agreement']:.4f}", flush=True)
    try:
        res["reference"] = reference_comparison(args.ckpt, m32, m16, prompt, args.num_step)
        print("REFERENCE", json.dumps(res["reference"]), flush=True)
    except ImportError as exc:
        res["reference"] = f"omnivoice not importable: {exc}"
    res["timing_bf16"] = time_one(m16, args.num_step, args.reps)
    res["timing_fp32"] = time_one(m32, args.num_step, max(1, args.reps - 1))
    if dev == "cuda":
        res["peak_mem_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    print(json.dumps(res, indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
