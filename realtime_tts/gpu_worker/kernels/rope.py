"""Per-head q/k RMSNorm followed by rotary position embedding (Qwen3 order), in place on packed rows.

q [num_tokens, num_q_heads, head_dim] and k [num_tokens, num_kv_heads, head_dim] may be views into one fused
qkv projection output (any token and head stride, unit element stride). cos/sin are [num_tokens, head_dim]
in the rotate-half layout (both halves carry the same angles), as rope_cos_sin builds them.
"""
# @triton.jit kernels are untyped by nature:
# mypy: disable-error-code="untyped-decorator,no-untyped-def"

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def norm_rope_halves(x1, x2, w1, w2, c1, c2, s1, s2, eps, DT: tl.constexpr, HEAD_DIM: tl.constexpr,
                     AXIS: tl.constexpr):
    """The one place the q/k norm + RoPE arithmetic lives (every kernel that applies it calls this): heads
    already loaded in fp32 as halves x1 = dims [0, HALF), x2 = [HALF, HEAD_DIM), the head dim along AXIS;
    RMSNorm, × weight (w1, w2), then rotate-half with cos/sin per half, with the eager layers' roundings (the
    normalised value and its product with the weight rounded to DT). → rotated halves in fp32, for the caller
    to round or store."""
    ss = tl.sum(x1 * x1, AXIS) + tl.sum(x2 * x2, AXIS)
    rstd = tl.expand_dims(1.0 / tl.sqrt(ss / HEAD_DIM + eps), AXIS)
    n1 = ((x1 * rstd).to(DT).to(tl.float32) * w1).to(DT).to(tl.float32)
    n2 = ((x2 * rstd).to(DT).to(tl.float32) * w2).to(DT).to(tl.float32)
    return n1 * c1 - n2 * s1, n2 * c2 + n1 * s2


@triton.jit
def _norm_rope_heads(x_ptr, stride_t, stride_h, w_ptr, c1, c2, s1, s2, num_heads, eps,
                     HEAD_DIM: tl.constexpr, BLOCK_H: tl.constexpr):
    HALF: tl.constexpr = HEAD_DIM // 2
    heads = tl.arange(0, BLOCK_H)
    dims = tl.arange(0, HALF)
    hmask = heads[:, None] < num_heads
    p1 = x_ptr + heads[:, None] * stride_h + dims[None, :]
    p2 = p1 + HALF
    x1 = tl.load(p1, mask=hmask, other=0.0).to(tl.float32)  # [BLOCK_H, HALF]
    x2 = tl.load(p2, mask=hmask, other=0.0).to(tl.float32)
    w1 = tl.load(w_ptr + dims).to(tl.float32)[None, :]
    w2 = tl.load(w_ptr + HALF + dims).to(tl.float32)[None, :]
    dt = x_ptr.dtype.element_ty
    r1, r2 = norm_rope_halves(x1, x2, w1, w2, c1, c2, s1, s2, eps, dt, HEAD_DIM, 1)
    tl.store(p1, r1.to(dt), mask=hmask)
    tl.store(p2, r2.to(dt), mask=hmask)


@triton.jit
def _qk_norm_rope_kernel(q_ptr, k_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr,
                         stride_qt, stride_qh, stride_kt, stride_kh, stride_cos, stride_sin,
                         num_q_heads, num_kv_heads, eps,
                         HEAD_DIM: tl.constexpr, BLOCK_QH: tl.constexpr, BLOCK_KH: tl.constexpr):
    HALF: tl.constexpr = HEAD_DIM // 2
    tok = tl.program_id(0).to(tl.int64)
    dims = tl.arange(0, HALF)
    c1 = tl.load(cos_ptr + tok * stride_cos + dims).to(tl.float32)[None, :]
    c2 = tl.load(cos_ptr + tok * stride_cos + HALF + dims).to(tl.float32)[None, :]
    s1 = tl.load(sin_ptr + tok * stride_sin + dims).to(tl.float32)[None, :]
    s2 = tl.load(sin_ptr + tok * stride_sin + HALF + dims).to(tl.float32)[None, :]
    _norm_rope_heads(q_ptr + tok * stride_qt, stride_qt, stride_qh, qw_ptr, c1, c2, s1, s2, num_q_heads, eps,
                     HEAD_DIM, BLOCK_QH)
    _norm_rope_heads(k_ptr + tok * stride_kt, stride_kt, stride_kh, kw_ptr, c1, c2, s1, s2, num_kv_heads, eps,
                     HEAD_DIM, BLOCK_KH)


def qk_norm_rope(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                 cos: torch.Tensor, sin: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """In place: q, k ← rope(rms_norm(q) * q_weight), rope(rms_norm(k) * k_weight). Returns (q, k)."""
    assert q.dim() == 3 and k.dim() == 3 and q.stride(2) == 1 and k.stride(2) == 1
    assert cos.stride(1) == 1 and sin.stride(1) == 1
    num_tokens, num_q_heads, head_dim = q.shape
    num_kv_heads = k.shape[1]
    if num_tokens:
        _qk_norm_rope_kernel[(num_tokens,)](
            q, k, q_weight, k_weight, cos, sin,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), cos.stride(0), sin.stride(0),
            num_q_heads, num_kv_heads, eps,
            HEAD_DIM=head_dim, BLOCK_QH=triton.next_power_of_2(num_q_heads),
            BLOCK_KH=triton.next_power_of_2(num_kv_heads), num_warps=4)
    return q, k


@triton.jit
def _head_norm_rope_kernel(x_ptr, w_ptr, pos_ptr, cos_ptr, sin_ptr, stride_xt, stride_xh, stride_tab,
                           num_tokens, num_heads, eps,
                           HEAD_DIM: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_T: tl.constexpr):
    """BLOCK_T tokens × BLOCK_H heads per program, one (token, head) per tile row; the angles are read from the
    position-indexed tables, so the caller gathers nothing."""
    HALF: tl.constexpr = HEAD_DIM // 2
    r = tl.arange(0, BLOCK_T * BLOCK_H)
    tok = tl.program_id(0).to(tl.int64) * BLOCK_T + r // BLOCK_H  # [BLOCK_T * BLOCK_H]
    head = r % BLOCK_H
    ok = ((tok < num_tokens) & (head < num_heads))[:, None]
    dims = tl.arange(0, HALF)
    p1 = x_ptr + tok[:, None] * stride_xt + head[:, None] * stride_xh + dims[None, :]
    p2 = p1 + HALF
    x1 = tl.load(p1, mask=ok, other=0.0).to(tl.float32)  # [BLOCK_T * BLOCK_H, HALF]
    x2 = tl.load(p2, mask=ok, other=0.0).to(tl.float32)
    w1 = tl.load(w_ptr + dims).to(tl.float32)[None, :]
    w2 = tl.load(w_ptr + HALF + dims).to(tl.float32)[None, :]
    dt = x_ptr.dtype.element_ty
    pos = tl.load(pos_ptr + tok, mask=tok < num_tokens, other=0)
    c = tl.load(cos_ptr + pos[:, None] * stride_tab + dims[None, :]).to(tl.float32)  # both halves: same angles
    s = tl.load(sin_ptr + pos[:, None] * stride_tab + dims[None, :]).to(tl.float32)
    r1, r2 = norm_rope_halves(x1, x2, w1, w2, c, c, s, s, eps, dt, HEAD_DIM, 1)
    tl.store(p1, r1.to(dt), mask=ok)
    tl.store(p2, r2.to(dt), mask=ok)


def head_norm_rope(x: torch.Tensor, weight: torch.Tensor, positions: torch.Tensor, cos_table: torch.Tensor,
                   sin_table: torch.Tensor, eps: float, tokens_per_program: int = 2) -> torch.Tensor:
    """In place on one of q or k: x ← rope(rms_norm(x) * weight), the same values as qk_norm_rope gives it.
    x [num_tokens, num_heads, head_dim] (any token/head stride, e.g. the k view of a fused qkv output);
    positions [num_tokens] index cos/sin tables [max_position, head_dim] (rotate-half layout). The bulk
    attention path runs it on k only and lets the attention kernel normalise q as it loads it."""
    assert x.dim() == 3 and x.stride(2) == 1 and cos_table.stride(1) == 1 and sin_table.stride(1) == 1
    assert cos_table.stride(0) == sin_table.stride(0)
    assert tokens_per_program & (tokens_per_program - 1) == 0, "tokens_per_program must be a power of two"
    num_tokens, num_heads, head_dim = x.shape
    if num_tokens:
        _head_norm_rope_kernel[(triton.cdiv(num_tokens, tokens_per_program),)](
            x, weight, positions, cos_table, sin_table, x.stride(0), x.stride(1), cos_table.stride(0),
            num_tokens, num_heads, eps,
            HEAD_DIM=head_dim, BLOCK_H=triton.next_power_of_2(num_heads), BLOCK_T=tokens_per_program, num_warps=4)
    return x


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float,
                 dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """positions [num_tokens] → cos, sin [num_tokens, head_dim] (angles in fp32, then cast, as Qwen3 does)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device=positions.device)
                                .float() / head_dim))  # [head_dim / 2]
    freqs = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)  # [num_tokens, head_dim]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def qk_norm_rope_ref(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                     cos: torch.Tensor, sin: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Out of place, with the eager layers' roundings."""
    def norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)

    c, s = cos[:, None, :], sin[:, None, :]
    qn, kn = norm(q, q_weight), norm(k, k_weight)
    return qn * c + _rotate_half(qn) * s, kn * c + _rotate_half(kn) * s
