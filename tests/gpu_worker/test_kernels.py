"""Each Triton kernel against its plain-torch reference: on CPU through Triton's interpreter, on CUDA native."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import torch

triton = pytest.importorskip("triton")

import sm90  # tests/gpu_worker/sm90.py

from realtime_tts.gpu_worker import kernels

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32, torch.bfloat16]
# Triton 3.6's CPU interpreter computes bf16 tl.dot wrongly (checked: garbage even for one 16x16 product), so
# on CPU the matmul kernel is checked in fp32 and fp16; bf16 attention is checked on CUDA only.
ATTN_DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE == "cuda" else [])


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    assert torch.isfinite(out).all(), "non-finite output"
    return float((out.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30))


def tol(dtype: torch.dtype) -> float:
    # fp32: tf32 dots on CUDA land near 3e-4; bf16 operands between 1e-3 and 1e-2.
    return {torch.float32: 2e-3, torch.float16: 4e-3}.get(dtype, 1.5e-2)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [64, 96])
def test_rms_norm_matches_reference(dtype: torch.dtype, hidden: int) -> None:
    g = gen(1)
    buf = torch.randn(9, hidden + 16, generator=g).to(DEVICE, dtype)
    x = buf[:, :hidden]  # strided rows, as a view into a wider buffer
    w = (1 + 0.1 * torch.randn(hidden, generator=g)).to(DEVICE, dtype)
    out = kernels.rms_norm(x, w, 1e-6)
    assert rel_err(out, kernels.rms_norm_ref(x.double(), w.double(), 1e-6)) < tol(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_rms_norm_updates_residual_and_normalises(dtype: torch.dtype) -> None:
    g = gen(2)
    hidden = 80
    x = torch.randn(11, hidden, generator=g).to(DEVICE, dtype)
    residual = (3 * torch.randn(11, hidden, generator=g)).to(DEVICE, dtype)
    w = torch.randn(hidden, generator=g).to(DEVICE, dtype)
    ref_out, ref_res = kernels.add_rms_norm_ref(x.double(), residual.double(), w.double(), 1e-6)
    res_before = residual.clone()
    out, res = kernels.add_rms_norm(x, residual, w, 1e-6)
    assert res.data_ptr() == residual.data_ptr(), "residual is updated in place"
    assert not torch.equal(residual, res_before)
    assert rel_err(res, ref_res) < tol(dtype)
    assert rel_err(out, ref_out) < tol(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_mul_on_fused_gate_up_views(dtype: torch.dtype) -> None:
    g = gen(3)
    inter = 1500  # not a multiple of the 1024 block: the tail is masked
    gate_up = (2 * torch.randn(6, 2 * inter, generator=g)).to(DEVICE, dtype)
    gate, up = gate_up[:, :inter], gate_up[:, inter:]
    out = torch.full((6, inter), float("nan"), dtype=dtype, device=DEVICE)
    kernels.silu_mul(gate, up, out=out)
    assert rel_err(out, kernels.silu_mul_ref(gate.double(), up.double())) < tol(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_qk_norm_rope_in_place_on_qkv_views(dtype: torch.dtype) -> None:
    g = gen(4)
    num_q, num_kv, head_dim = 4, 2, 32
    lens = [5, 9, 3]
    num_tokens = sum(lens)
    positions = torch.cat([torch.arange(n) for n in lens]).to(DEVICE)  # restart per packed row
    qkv = torch.randn(num_tokens, (num_q + 2 * num_kv) * head_dim, generator=g).to(DEVICE, dtype)
    heads = qkv.view(num_tokens, num_q + 2 * num_kv, head_dim)
    q, k, v = heads[:, :num_q], heads[:, num_q:num_q + num_kv], heads[:, num_q + num_kv:]
    qw = (1 + 0.2 * torch.randn(head_dim, generator=g)).to(DEVICE, dtype)
    kw = (1 + 0.2 * torch.randn(head_dim, generator=g)).to(DEVICE, dtype)
    cos, sin = kernels.rope_cos_sin(positions, head_dim, 1e6, dtype)
    cos64, sin64 = kernels.rope_cos_sin(positions, head_dim, 1e6, torch.float64)
    ref_q, ref_k = kernels.qk_norm_rope_ref(q.double(), k.double(), qw.double(), kw.double(), cos64, sin64, 1e-6)
    v_before = v.clone()
    kernels.qk_norm_rope(q, k, qw, kw, cos, sin, 1e-6)
    assert rel_err(q, ref_q) < tol(dtype)
    assert rel_err(k, ref_k) < tol(dtype)
    assert torch.equal(v, v_before), "v is not touched"


@pytest.mark.parametrize("dtype", DTYPES)
def test_cfg_argmax_matches_reference(dtype: torch.dtype) -> None:
    g = gen(8)
    vocab, mask_id = 1025, 1024
    c = (3 * torch.randn(3, 10, vocab, generator=g)).to(DEVICE, dtype)
    u = (3 * torch.randn(3, 10, vocab, generator=g)).to(DEVICE, dtype)
    c[0, 0, mask_id] = 100.0  # MASK would win; it must be excluded
    guidance = torch.tensor([2.0, 0.0, 0.5], device=DEVICE)  # 0 = no guidance: plain cond log-softmax
    pred, conf = kernels.cfg_argmax(c, u, guidance, mask_id)
    ref_pred, ref_conf = kernels.cfg_argmax_ref(c.double(), u.double(), guidance.double(), mask_id)
    assert torch.equal(pred, ref_pred)
    assert pred[0, 0] != mask_id
    assert torch.allclose(conf.double(), ref_conf, atol=1e-4, rtol=1e-5)


def _cu(lens: list[int]) -> torch.Tensor:
    return torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device=DEVICE)


@pytest.mark.parametrize("dtype", ATTN_DTYPES)
@pytest.mark.parametrize("shape", [(4, 2, 32), (16, 8, 128)])
@pytest.mark.parametrize("use_tiles", [False, True])
def test_varlen_attention_matches_per_row_sdpa(dtype: torch.dtype, shape: tuple[int, int, int],
                                               use_tiles: bool) -> None:
    g = gen(5)
    num_q, num_kv, head_dim = shape
    lens = [37, 1, 70, 5] if head_dim == 32 else [20, 9]
    num_tokens = sum(lens)
    q = torch.randn(num_tokens, num_q, head_dim, generator=g).to(DEVICE, dtype)
    k = torch.randn(num_tokens, num_kv, head_dim, generator=g).to(DEVICE, dtype)
    v = torch.randn(num_tokens, num_kv, head_dim, generator=g).to(DEVICE, dtype)
    # two trailing empty rows and a max_seqlen above the longest row: the shape of a padded graph bucket
    cu = _cu(lens + [0, 0])
    out = torch.full_like(q, float("nan"))
    tiles = None
    if use_tiles:
        # graph-bucket shape: the work list has spare slots (row -1) past the real tiles
        tiles = kernels.attention_tiles(cu, kernels.max_attention_tiles(num_tokens + 64, 8))
        real = sum(-(-n // 64) for n in lens)
        assert (tiles[:real, 0] >= 0).all() and (tiles[real:, 0] == -1).all()
    kernels.varlen_attention(q, k, v, cu, max(lens) + 40, out=out, tiles=tiles)
    ref = kernels.varlen_attention_ref(q.double(), k.double(), v.double(), cu, max(lens))
    assert rel_err(out, ref) < tol(dtype)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_kernels_at_omnivoice_size_on_gpu() -> None:
    g = gen(7)
    dtype = torch.bfloat16
    lens = [182, 150, 307, 150, 1, 64]
    num_tokens = sum(lens)
    q = torch.randn(num_tokens, 16, 128, generator=g).to("cuda", dtype)
    k = torch.randn(num_tokens, 8, 128, generator=g).to("cuda", dtype)
    v = torch.randn(num_tokens, 8, 128, generator=g).to("cuda", dtype)
    cu = _cu(lens)
    out = kernels.varlen_attention(q, k, v, cu, 512)
    assert rel_err(out, kernels.varlen_attention_ref(q.double(), k.double(), v.double(), cu, 512)) < 1.5e-2
    x = torch.randn(num_tokens, 1024, generator=g).to("cuda", dtype)
    r = torch.randn(num_tokens, 1024, generator=g).to("cuda", dtype)
    w = torch.randn(1024, generator=g).to("cuda", dtype)
    ref_out, ref_res = kernels.add_rms_norm_ref(x.double(), r.double(), w.double(), 1e-6)
    out2, res2 = kernels.add_rms_norm(x, r, w, 1e-6)
    assert rel_err(out2, ref_out) < 1.5e-2 and rel_err(res2, ref_res) < 1.5e-2


@pytest.mark.parametrize("dtype", ATTN_DTYPES)
def test_varlen_attention_rope_equals_norm_rope_then_attention(dtype: torch.dtype) -> None:
    g = gen(9)
    num_q, num_kv, head_dim = 4, 2, 32
    lens = [37, 5, 70]
    num_tokens = sum(lens)
    positions = torch.cat([torch.arange(n) for n in lens]).to(DEVICE)
    qkv = (2 * torch.randn(num_tokens, (num_q + 2 * num_kv) * head_dim, generator=g)).to(DEVICE, dtype)
    heads = qkv.view(num_tokens, num_q + 2 * num_kv, head_dim)
    q, k, v = heads[:, :num_q], heads[:, num_q:num_q + num_kv], heads[:, num_q + num_kv:]
    qw = (1 + 0.2 * torch.randn(head_dim, generator=g)).to(DEVICE, dtype)
    kw = (1 + 0.2 * torch.randn(head_dim, generator=g)).to(DEVICE, dtype)
    cos_t, sin_t = kernels.rope_cos_sin(torch.arange(128, device=DEVICE), head_dim, 1e6, torch.float32)
    cu = _cu(lens + [0])
    tiles = kernels.attention_tiles(cu, kernels.max_attention_tiles(num_tokens, 4, 64), 64)
    raw = qkv.clone()
    out = torch.full_like(q, float("nan"))
    kernels.varlen_attention_rope(q, k, v, cu, max(lens), tiles, qw, kw, positions, cos_t, sin_t, 1e-6, out=out)
    assert torch.equal(qkv, raw), "q and k are read, not rewritten"
    rq, rk = kernels.qk_norm_rope_ref(q.double(), k.double(), qw.double(), kw.double(), cos_t[positions].double(),
                                      sin_t[positions].double(), 1e-6)
    ref = kernels.varlen_attention_ref(rq, rk, v.double(), cu, max(lens))
    assert rel_err(out, ref) < tol(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_embed_matches_reference(dtype: torch.dtype) -> None:
    g = gen(10)
    hidden, vocab, audio_vocab = 48, 1300, 1025
    text = torch.randn(vocab, hidden, generator=g).to(DEVICE, dtype)
    audio = torch.randn(8 * audio_vocab, hidden, generator=g).to(DEVICE, dtype)
    num_tokens = 23
    audio_mask = (torch.arange(num_tokens) >= 9).to(DEVICE)
    ids = torch.randint(0, audio_vocab, (8, num_tokens), generator=g).to(DEVICE)
    ids[:, :9] = torch.randint(0, vocab, (9,), generator=g).to(DEVICE)  # text positions: one id on all 8 rows
    out = kernels.embed(ids, audio_mask, text, audio, audio_vocab)
    ref = kernels.embed_ref(ids, audio_mask, text.double(), audio.double(), audio_vocab)
    assert out.dtype == torch.float32
    assert rel_err(out, ref) < 1e-6


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens_per_program", [1, 4])
def test_head_norm_rope_on_k_view_matches_reference(dtype: torch.dtype, tokens_per_program: int) -> None:
    g = gen(11)
    num_q, num_kv, head_dim = 4, 3, 32  # 3 kv heads: the head block is padded to 4 and masked
    lens = [6, 11]  # 17 tokens: the last program of 4 tokens is partly past the end
    num_tokens = sum(lens)
    positions = torch.cat([torch.arange(n) for n in lens]).to(DEVICE)
    qkv = (2 * torch.randn(num_tokens, (num_q + 2 * num_kv) * head_dim, generator=g)).to(DEVICE, dtype)
    heads = qkv.view(num_tokens, num_q + 2 * num_kv, head_dim)
    q, k = heads[:, :num_q], heads[:, num_q:num_q + num_kv]
    kw = (1 + 0.2 * torch.randn(head_dim, generator=g)).to(DEVICE, dtype)
    cos_t, sin_t = kernels.rope_cos_sin(torch.arange(64, device=DEVICE), head_dim, 1e6, torch.float32)
    _, ref_k = kernels.qk_norm_rope_ref(q.double(), k.double(), kw.double(), kw.double(),
                                        cos_t[positions].double(), sin_t[positions].double(), 1e-6)
    before = qkv.clone()
    kernels.head_norm_rope(k, kw, positions, cos_t, sin_t, 1e-6, tokens_per_program=tokens_per_program)
    assert rel_err(k, ref_k) < tol(dtype)
    rest = before.view_as(heads).clone()
    rest[:, num_q:num_q + num_kv] = heads[:, num_q:num_q + num_kv]
    assert torch.equal(heads, rest), "only k is written"


def _raw_qkv(seed: int, num_tokens: int, shape: tuple[int, int, int], dtype: torch.dtype) -> torch.Tensor:
    num_q, num_kv, head_dim = shape
    g = gen(seed)
    return (2 * torch.randn(num_tokens, (num_q + 2 * num_kv) * head_dim, generator=g)).to(DEVICE, dtype)


# (q heads, kv heads, head_dim), row lengths: odd lengths, a 1-token row; GQA groups 2, 4 and 3 (3 does not
# stack into a power-of-two tile: one head per program). Case 1 also runs 32-token per-head tiles.
ATTN_CASES = [((4, 2, 32), [37, 1, 70, 5]), ((8, 2, 16), [23, 9]), ((6, 2, 32), [19, 33])]


@pytest.mark.parametrize("dtype", ATTN_DTYPES)
@pytest.mark.parametrize("variant", ["split", "q_fused", "q_fused_swap"])
@pytest.mark.parametrize(("case", "heads_per_program"), [(0, 1), (0, None), (1, None), (2, None)])
def test_norm_rope_attention_equals_norm_rope_then_attention(dtype: torch.dtype, variant: str, case: int,
                                                             heads_per_program: int | None) -> None:
    mode = variant.removesuffix("_swap")  # _swap: the q tile rotated full-width (q_rope_join=False)
    shape, lens = ATTN_CASES[case]
    num_q, num_kv, head_dim = shape
    real = sum(lens)
    num_tokens = real + 3  # 3 padding tokens past the rows (a graph bucket's tail): never attended or written
    qkv = _raw_qkv(12 + case, num_tokens, shape, dtype)
    heads = qkv.view(num_tokens, num_q + 2 * num_kv, head_dim)
    q, k, v = heads[:, :num_q], heads[:, num_q:num_q + num_kv], heads[:, num_q + num_kv:]
    g = gen(20 + case)
    qw = (1 + 0.2 * torch.randn(head_dim, generator=g)).to(DEVICE, dtype)
    kw = (1 + 0.2 * torch.randn(head_dim, generator=g)).to(DEVICE, dtype)
    positions = torch.cat([torch.arange(n) for n in lens] + [torch.zeros(3, dtype=torch.int64)]).to(DEVICE)
    cos_t, sin_t = kernels.rope_cos_sin(torch.arange(128, device=DEVICE), head_dim, 1e6, torch.float32)
    cu = _cu(lens + [0, 0])  # two trailing empty rows
    block_m = 32 if case == 1 else 64
    # graph-bucket shape: spare work-list slots (row -1) and a max_seqlen above the longest row
    tiles = kernels.attention_tiles(cu, kernels.max_attention_tiles(num_tokens + 64, 8, block_m), block_m)
    rq, rk = kernels.qk_norm_rope_ref(q.double(), k.double(), qw.double(), kw.double(), cos_t[positions].double(),
                                      sin_t[positions].double(), 1e-6)
    ref = kernels.varlen_attention_ref(rq, rk, v.double(), cu, max(lens))
    q_raw, v_raw = q.clone(), v.clone()
    out = torch.full_like(q, float("nan"))
    # split with the angles gathered by the caller once (as a forward does) or by the call itself
    angles = (cos_t[positions], sin_t[positions]) if mode == "split" and heads_per_program is None else None
    kernels.norm_rope_attention(q, k, v, cu, max(lens) + 40, tiles, qw, kw, positions, cos_t, sin_t, 1e-6,
                                out=out, mode=mode, heads_per_program=heads_per_program, block_m=block_m,
                                angles=angles, q_rope_join=not variant.endswith("_swap"))
    assert rel_err(out[:real], ref[:real]) < tol(dtype)
    assert out[real:].isnan().all(), "padding tokens are not written"
    assert rel_err(k, rk) < tol(dtype), "k is left normalised and rotated"
    assert torch.equal(v, v_raw)
    if mode == "q_fused":
        assert torch.equal(q, q_raw), "q is read raw, not rewritten"
    else:
        assert rel_err(q, rq) < tol(dtype)


@pytest.mark.parametrize("entry", ["varlen_attention", "varlen_attention_gqa"])
def test_varlen_attention_rows_and_heads_stay_apart(entry: str) -> None:
    """Changing one row's keys or one kv head's values moves only that row's / that group's outputs: through the
    public wrapper (its own tiles, one q head per program) and the GQA kernel with two q heads per program."""
    g = gen(13)
    lens = [12, 20]
    q = torch.randn(32, 4, 16, generator=g).to(DEVICE)
    k = torch.randn(32, 2, 16, generator=g).to(DEVICE)
    v = torch.randn(32, 2, 16, generator=g).to(DEVICE)
    cu = _cu(lens)
    tiles = kernels.attention_tiles(cu, kernels.max_attention_tiles(32, 2, 16), 16)

    def run(k_: torch.Tensor, v_: torch.Tensor) -> torch.Tensor:
        if entry == "varlen_attention":
            return kernels.varlen_attention(q, k_, v_, cu, 20)
        return kernels.varlen_attention_gqa(q, k_, v_, cu, 20, tiles, heads_per_program=2, block_m=16,
                                            block_n=16)

    a = run(k, v)
    k2, v2 = k.clone(), v.clone()
    k2[12:] += 5.0  # change only the second row's keys
    b = run(k2, v)
    assert torch.equal(a[:12], b[:12]) and not torch.allclose(a[12:], b[12:])
    v2[:, 1] -= 3.0  # kv head 1 serves q heads 2 and 3 only
    c = run(k, v2)
    assert torch.equal(a[:, :2], c[:, :2]) and not torch.allclose(a[:, 2:], c[:, 2:])


def test_norm_rope_attention_refuses_an_unknown_mode() -> None:
    q = torch.zeros(4, 2, 16, device=DEVICE)
    k = torch.zeros(4, 1, 16, device=DEVICE)
    cu = _cu([4])
    tiles = kernels.attention_tiles(cu, 2)
    w = torch.ones(16, device=DEVICE)
    cos_t, sin_t = kernels.rope_cos_sin(torch.arange(8, device=DEVICE), 16, 1e6, torch.float32)
    with pytest.raises(ValueError, match="attention mode"):
        kernels.norm_rope_attention(q, k, k, cu, 4, tiles, w, w, torch.arange(4, device=DEVICE), cos_t, sin_t,
                                    1e-6, mode="flash")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("mode", ["split", "q_fused", "fused"])
@pytest.mark.parametrize("block", [(64, 32, 4, 3), (32, 64, 4, 2), (64, 64, 8, 2)])
def test_norm_rope_attention_at_omnivoice_size_on_gpu(mode: str, block: tuple[int, int, int, int]) -> None:
    bm, bn, warps, stages = block
    lens = [182, 150, 307, 150, 1, 64]
    real = sum(lens)
    qkv = _raw_qkv(14, real, (16, 8, 128), torch.bfloat16)
    heads = qkv.view(real, 32, 128)
    q, k, v = heads[:, :16], heads[:, 16:24], heads[:, 24:]
    g = gen(15)
    qw = (1 + 0.2 * torch.randn(128, generator=g)).to("cuda", torch.bfloat16)
    kw = (1 + 0.2 * torch.randn(128, generator=g)).to("cuda", torch.bfloat16)
    positions = torch.cat([torch.arange(n) for n in lens]).to("cuda")
    cos_t, sin_t = kernels.rope_cos_sin(torch.arange(4096, device="cuda"), 128, 1e6, torch.float32)
    cu = _cu(lens + [0])
    tiles = kernels.attention_tiles(cu, kernels.max_attention_tiles(real, len(lens) + 1, bm), bm)
    rq, rk = kernels.qk_norm_rope_ref(q.double(), k.double(), qw.double(), kw.double(), cos_t[positions].double(),
                                      sin_t[positions].double(), 1e-6)
    ref = kernels.varlen_attention_ref(rq, rk, v.double(), cu, 512)
    out = kernels.norm_rope_attention(q, k, v, cu, 512, tiles, qw, kw, positions, cos_t, sin_t, 1e-6, mode=mode,
                                      block_m=bm, block_n=bn, num_warps=warps, num_stages=stages)
    assert rel_err(out, ref) < 1.5e-2


# Compiles bulk attention configs for sm_90 (the H200) with the Triton wheel's own ptxas, no GPU needed, the
# pointer and stride arguments marked 16-divisible as the JIT specialises them at the real shapes.
def _attention_build(heads: int, bm: int, bn: int, warps: int, stages: int) -> dict[str, Any]:
    fn = importlib.import_module("realtime_tts.gpu_worker.kernels.attention")._varlen_gqa_fwd_kernel
    ptr = {"cu_ptr": "*i32", "tiles_ptr": "*i32", "pos_ptr": "*i64", "cos_ptr": "*fp32", "sin_ptr": "*fp32"}
    sig = {n: ("constexpr" if n.isupper() else ptr.get(n, "*bf16") if n.endswith("_ptr")
               else "i32" if n.startswith("stride") else "fp32") for n in fn.arg_names}
    consts = {"STATIC_N_END": 0, "GROUP": 2, "HEADS": heads, "HEAD_DIM": 128, "BLOCK_M": bm, "BLOCK_N": bn,
              "NORM_Q": True, "Q_JOIN": True}
    return {"kernel": "realtime_tts.gpu_worker.kernels.attention:_varlen_gqa_fwd_kernel", "signature": sig,
            "constexprs": consts, "options": {"num_warps": warps, "num_stages": stages},
            "divisible": [n for n in fn.arg_names if n.endswith("_ptr") or n.startswith("stride")]}


@pytest.mark.slow
def test_q_fused_gqa_attention_compiles_for_sm90_without_spills() -> None:
    """The q_fused GQA kernel at the bench's main bulk configs: tensor-core wgmma, K/V loads pipelined through
    cp.async, no register spills."""
    configs = [(2, 32, 64, 4, 3), (2, 64, 32, 8, 3)]
    for config, u in zip(configs, sm90.build([_attention_build(*c) for c in configs]), strict=True):
        assert u["stack"] == 0, f"{config} spills registers"
        assert u["ptx"].count("wgmma.mma_async") > 0, config
        assert u["ptx"].count("cp.async.cg") + u["ptx"].count("cp.async.ca") > 0, config


GEMM_DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE == "cuda" else [])
# Small tiles on CPU (the interpreter runs each program in Python); several tiles per program (persistent),
# one program per tile, and a group wider than the M-tiles.
GEMM_CONFIGS = [kernels.GemmConfig(32, 32, 16, 4, 2, 2, True), kernels.GemmConfig(16, 32, 32, 4, 2, 8, False)]


@pytest.mark.parametrize("dtype", GEMM_DTYPES)
@pytest.mark.parametrize("config", GEMM_CONFIGS, ids=lambda c: c.label())
@pytest.mark.parametrize(("m", "k", "inter"), [(70, 48, 40), (33, 64, 96), (1, 32, 32)])
def test_swiglu_gemm_matches_matmuls_then_silu_mul(dtype: torch.dtype, config: kernels.GemmConfig, m: int,
                                                    k: int, inter: int) -> None:
    g = gen(11)
    x = torch.randn(m, k, generator=g).to(DEVICE, dtype)
    gate_up = (torch.randn(2 * inter, k, generator=g) / k ** 0.5).to(DEVICE, dtype)  # gate rows, then up rows
    tiles = kernels.interleave_gate_up(gate_up, config.block_n)
    out = torch.full((m, inter), float("nan"), dtype=dtype, device=DEVICE)
    kernels.swiglu_gemm(x, tiles, inter, out=out, config=config)
    assert rel_err(out, kernels.swiglu_gemm_ref(x.double(), gate_up.double())) < tol(dtype)
    # the up half matters: swapping the halves changes the result
    swapped = kernels.interleave_gate_up(torch.cat([gate_up[inter:], gate_up[:inter]]), config.block_n)
    assert rel_err(kernels.swiglu_gemm(x, swapped, inter, config=config), out.double()) > 10 * tol(dtype)


def test_interleave_gate_up_bands_gate_then_up_rows() -> None:
    gate_up = torch.arange(10 * 2, dtype=torch.float32).view(10, 2)  # inter 5: gate rows 0-4, up rows 5-9
    tiles = kernels.interleave_gate_up(gate_up, 4)  # bands of 4: [g0-3, u0-3], [g4, 0, 0, 0, u4, 0, 0, 0]
    assert tiles.shape == (16, 2)
    assert torch.equal(tiles[:4], gate_up[:4]) and torch.equal(tiles[4:8], gate_up[5:9])
    assert torch.equal(tiles[8], gate_up[4]) and torch.equal(tiles[12], gate_up[9])
    assert not tiles[9:12].any() and not tiles[13:].any()


@pytest.mark.parametrize("dtype", GEMM_DTYPES)
@pytest.mark.parametrize("config", GEMM_CONFIGS, ids=lambda c: c.label())
def test_gemm_matches_matmul(dtype: torch.dtype, config: kernels.GemmConfig) -> None:
    g = gen(12)
    x = torch.randn(77, 64, generator=g).to(DEVICE, dtype)
    w = torch.randn(40, 64, generator=g).to(DEVICE, dtype)
    out = kernels.gemm(x, w, config=config)
    assert out.shape == (77, 40)
    assert rel_err(out, x.double() @ w.double().t()) < tol(dtype)


def test_gemm_config_parses_the_bench_spelling() -> None:
    cfg = kernels.GemmConfig.parse("128,64,32,4,3,8,0")
    assert cfg == kernels.GemmConfig(128, 64, 32, 4, 3, 8, False)
    assert cfg.label() == "128x64x32w4s3g8"
    assert kernels.GemmConfig.parse("64,64,64,4,2").group_m == kernels.GemmConfig().group_m


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_swiglu_gemm_at_omnivoice_size_on_gpu() -> None:
    g = gen(13)
    x = torch.randn(4000, 1024, generator=g).to("cuda", torch.bfloat16)
    gate_up = (torch.randn(6144, 1024, generator=g) / 32).to("cuda", torch.bfloat16)
    out = kernels.swiglu_gemm(x, kernels.interleave_gate_up(gate_up, kernels.SWIGLU_CONFIG.block_n), 3072)
    gu = torch.matmul(x, gate_up.t())
    assert rel_err(out, kernels.silu_mul(gu[:, :3072], gu[:, 3072:])) < 1e-2


def _gemm_build(config: kernels.GemmConfig, swiglu: bool, n: int, k: int) -> dict[str, Any]:
    w_rows = 2 * config.block_n if swiglu else config.block_n
    descs = {"x_desc": (config.block_m, config.block_k), "w_desc": (w_rows, config.block_k),
             "out_desc": (config.block_m, config.block_n)}
    fn = importlib.import_module("realtime_tts.gpu_worker.kernels.gemm")._gemm_kernel
    sig = {name: f"tensordesc<bf16[{rows}, {cols}]>" for name, (rows, cols) in descs.items()} | {"M": "i32"}
    sig |= {name: "constexpr" for name in fn.arg_names if name not in sig}
    consts = {"N": n, "K": k, "NUM_PROGRAMS": 132, "STATIC_TILES": 0, "BLOCK_M": config.block_m,
              "BLOCK_N": config.block_n, "BLOCK_K": config.block_k, "GROUP_M": config.group_m, "SWIGLU": swiglu}
    return {"kernel": "realtime_tts.gpu_worker.kernels.gemm:_gemm_kernel", "signature": sig, "constexprs": consts,
            "options": {"num_warps": config.num_warps, "num_stages": config.num_stages}}


@pytest.mark.slow
def test_gemm_kernels_compile_for_sm90_within_shared_memory() -> None:
    """The default GEMM configs at the backbone's shapes, compiled for sm_90 here (no GPU needed): within the
    H100/H200 227 KB of shared memory per block (a launch over it fails only on the device), wgmma, no spills."""
    g, sw = kernels.GEMM_CONFIG, kernels.SWIGLU_CONFIG
    specs = {"gemm": _gemm_build(g, False, 1024, 3072), "swiglu": _gemm_build(sw, True, 3072, 1024)}
    for name, u in zip(specs, sm90.build(list(specs.values())), strict=True):
        assert u["shared"] <= 232448, f"{name} needs {u['shared']} bytes of shared memory"
        assert u["stack"] == 0 and u["ptx"].count("wgmma.mma_async") > 0, name
