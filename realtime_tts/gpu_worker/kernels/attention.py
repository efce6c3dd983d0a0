"""Bidirectional variable-length flash attention (forward only) over packed rows, with GQA.

q [num_tokens, num_q_heads, head_dim], k/v [num_tokens, num_kv_heads, head_dim]; row r owns tokens
cu_seqlens[r]:cu_seqlens[r+1] and attends to exactly those (no mask across rows, no causality). Trailing rows
of length 0 are allowed, so a CUDA graph can be captured for a maximum row count and replayed for fewer.
"""
# @triton.jit kernels are untyped by nature:
# mypy: disable-error-code="untyped-decorator,no-untyped-def"

from __future__ import annotations

import itertools
import math

import torch
import triton
import triton.language as tl

from realtime_tts.gpu_worker.kernels.rope import head_norm_rope, norm_rope_halves, qk_norm_rope


@triton.jit
def _softmax_accumulate(s, valid, tok_n, v_base, stride_vt, offs_d, m_i, l_i, acc):
    """The online-softmax update of one key block shared by both kernels: scores s [BLOCK_M, BLOCK_N] (log2
    domain) → running max m_i, running sum l_i and the output accumulator acc rescaled and advanced."""
    s = tl.where(valid[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    p = tl.exp2(s - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    v = tl.load(v_base + tok_n[:, None] * stride_vt + offs_d[None, :], mask=valid[:, None], other=0.0)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    return m_new, l_i, acc


@triton.jit
def _attend_block(q, k_base, v_base, stride_kt, stride_vt, start, seqlen, n0, offs_n, offs_d, qk_scale_log2,
                  m_i, l_i, acc):
    cols = n0 + offs_n
    valid = cols < seqlen
    tok_n = (start + cols).to(tl.int64)
    k = tl.load(k_base + tok_n[None, :] * stride_kt + offs_d[:, None], mask=valid[None, :], other=0.0)
    s = tl.dot(q, k) * qk_scale_log2  # [BLOCK_M, BLOCK_N], log2 domain
    return _softmax_accumulate(s, valid, tok_n, v_base, stride_vt, offs_d, m_i, l_i, acc)


@triton.jit
def _norm_rope_kt(k_base, stride_kt, tok_n, valid, offs_h, kw1, kw2, pos_ptr, cos_ptr, sin_ptr, stride_tab, eps,
                  HEAD_DIM: tl.constexpr):
    """K block transposed, [HALF, BLOCK_N] per half: RMSNorm over the head dim × weight, then rotate."""
    HALF: tl.constexpr = HEAD_DIM // 2
    dt = k_base.dtype.element_ty
    k1 = tl.load(k_base + tok_n[None, :] * stride_kt + offs_h[:, None], mask=valid[None, :], other=0.0)
    k2 = tl.load(k_base + tok_n[None, :] * stride_kt + HALF + offs_h[:, None], mask=valid[None, :], other=0.0)
    pos = tl.load(pos_ptr + tok_n, mask=valid, other=0)
    c = tl.load(cos_ptr + pos[None, :] * stride_tab + offs_h[:, None])  # both halves share the angles
    s = tl.load(sin_ptr + pos[None, :] * stride_tab + offs_h[:, None])
    r1, r2 = norm_rope_halves(k1.to(tl.float32), k2.to(tl.float32), kw1, kw2, c, c, s, s, eps, dt, HEAD_DIM, 0)
    return r1.to(dt), r2.to(dt)


@triton.jit
def _attend_block_rope(rq1, rq2, k_base, v_base, stride_kt, stride_vt, start, seqlen, n0, offs_n, offs_h, offs_d,
                       kw1, kw2, pos_ptr, cos_ptr, sin_ptr, stride_tab, eps, qk_scale_log2, m_i, l_i, acc,
                       HEAD_DIM: tl.constexpr):
    cols = n0 + offs_n
    valid = cols < seqlen
    tok_n = (start + cols).to(tl.int64)
    rk1, rk2 = _norm_rope_kt(k_base, stride_kt, tok_n, valid, offs_h, kw1, kw2, pos_ptr, cos_ptr, sin_ptr,
                             stride_tab, eps, HEAD_DIM)
    s = (tl.dot(rq1, rk1) + tl.dot(rq2, rk2)) * qk_scale_log2  # [BLOCK_M, BLOCK_N], log2 domain
    return _softmax_accumulate(s, valid, tok_n, v_base, stride_vt, offs_d, m_i, l_i, acc)


@triton.jit
def _varlen_rope_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, cu_ptr, tiles_ptr, qw_ptr, kw_ptr, pos_ptr, cos_ptr,
                            sin_ptr, stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot,
                            stride_oh, stride_tab, eps, qk_scale_log2,
                            STATIC_N_END: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The attention of _varlen_gqa_fwd_kernel (one head per program) on RAW q/k projections: per-head RMSNorm ×
    weight and RoPE are applied as the tiles are loaded (the eager layers' roundings), so no separate pass writes
    q and k back."""
    HALF: tl.constexpr = HEAD_DIM // 2
    row = tl.load(tiles_ptr + 2 * tl.program_id(0))
    m_block = tl.load(tiles_ptr + 2 * tl.program_id(0) + 1)
    if row < 0:
        return
    head = tl.program_id(2)
    start = tl.load(cu_ptr + row)
    seqlen = tl.load(cu_ptr + row + 1) - start
    if m_block * BLOCK_M >= seqlen:
        return
    kv_head = head // GROUP
    dt = q_ptr.dtype.element_ty
    offs_m = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_h = tl.arange(0, HALF)
    offs_d = tl.arange(0, HEAD_DIM)
    m_valid = offs_m < seqlen
    tok_m = (start + offs_m).to(tl.int64)
    q_base = q_ptr + tok_m[:, None] * stride_qt + head * stride_qh + offs_h[None, :]
    q1 = tl.load(q_base, mask=m_valid[:, None], other=0.0).to(tl.float32)  # [BLOCK_M, HALF]
    q2 = tl.load(q_base + HALF, mask=m_valid[:, None], other=0.0).to(tl.float32)
    qw1 = tl.load(qw_ptr + offs_h).to(tl.float32)[None, :]
    qw2 = tl.load(qw_ptr + HALF + offs_h).to(tl.float32)[None, :]
    pos = tl.load(pos_ptr + tok_m, mask=m_valid, other=0)
    c = tl.load(cos_ptr + pos[:, None] * stride_tab + offs_h[None, :])
    s = tl.load(sin_ptr + pos[:, None] * stride_tab + offs_h[None, :])
    rq1, rq2 = norm_rope_halves(q1, q2, qw1, qw2, c, c, s, s, eps, dt, HEAD_DIM, 1)
    rq1 = rq1.to(dt)
    rq2 = rq2.to(dt)
    kw1 = tl.load(kw_ptr + offs_h).to(tl.float32)[:, None]
    kw2 = tl.load(kw_ptr + HALF + offs_h).to(tl.float32)[:, None]
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    k_base = k_ptr + kv_head * stride_kh
    v_base = v_ptr + kv_head * stride_vh
    if STATIC_N_END == 0:
        for n0 in range(0, seqlen, BLOCK_N):
            m_i, l_i, acc = _attend_block_rope(rq1, rq2, k_base, v_base, stride_kt, stride_vt, start, seqlen, n0,
                                               offs_n, offs_h, offs_d, kw1, kw2, pos_ptr, cos_ptr, sin_ptr,
                                               stride_tab, eps, qk_scale_log2, m_i, l_i, acc, HEAD_DIM)
    else:
        for n0 in range(0, STATIC_N_END, BLOCK_N):
            m_i, l_i, acc = _attend_block_rope(rq1, rq2, k_base, v_base, stride_kt, stride_vt, start, seqlen, n0,
                                               offs_n, offs_h, offs_d, kw1, kw2, pos_ptr, cos_ptr, sin_ptr,
                                               stride_tab, eps, qk_scale_log2, m_i, l_i, acc, HEAD_DIM)
    out = acc / l_i[:, None]
    tl.store(o_ptr + tok_m[:, None] * stride_ot + head * stride_oh + offs_d[None, :],
             out.to(o_ptr.dtype.element_ty), mask=m_valid[:, None])


@triton.jit
def _norm_rope_q_tile(q_rows, m_valid, tok_m, qw_ptr, pos_ptr, cos_ptr, sin_ptr, stride_tab, eps,
                      HEAD_DIM: tl.constexpr, TILE_M: tl.constexpr, JOIN: tl.constexpr):
    """The query tile [TILE_M, HEAD_DIM] from raw rows (q_rows: each tile row's first element): RMSNorm ×
    weight, then RoPE, with the eager layers' roundings. JOIN: work on [TILE_M, HALF] halves (half the live
    registers) and interleave them back into one tile; else full-width tiles, the rotate-half partner read by a
    second, half-swapped load (L1-resident) so no register shuffle is needed."""
    HALF: tl.constexpr = HEAD_DIM // 2
    dt = q_rows.dtype.element_ty
    pos = tl.load(pos_ptr + tok_m, mask=m_valid, other=0)
    if JOIN:
        offs_h = tl.arange(0, HALF)
        x1 = tl.load(q_rows[:, None] + offs_h[None, :], mask=m_valid[:, None], other=0.0).to(tl.float32)
        x2 = tl.load(q_rows[:, None] + HALF + offs_h[None, :], mask=m_valid[:, None], other=0.0).to(tl.float32)
        w1 = tl.load(qw_ptr + offs_h).to(tl.float32)[None, :]
        w2 = tl.load(qw_ptr + HALF + offs_h).to(tl.float32)[None, :]
        c = tl.load(cos_ptr + pos[:, None] * stride_tab + offs_h[None, :]).to(tl.float32)  # halves share angles
        s = tl.load(sin_ptr + pos[:, None] * stride_tab + offs_h[None, :]).to(tl.float32)
        r1, r2 = norm_rope_halves(x1, x2, w1, w2, c, c, s, s, eps, dt, HEAD_DIM, 1)
        r1 = r1.to(dt)
        r2 = r2.to(dt)
        # [TILE_M, HALF] × 2 → [TILE_M, 2, HALF] → row-major [TILE_M, HEAD_DIM] = (r1 | r2)
        q = tl.reshape(tl.permute(tl.join(r1, r2), (0, 2, 1)), (TILE_M, HEAD_DIM))
    else:
        offs_d = tl.arange(0, HEAD_DIM)
        # rotate_half(x)[d] is -x[d + HALF] below HALF and x[d - HALF] above; weight and sign follow the swap
        swap = (offs_d + HALF) % HEAD_DIM
        x = tl.load(q_rows[:, None] + offs_d[None, :], mask=m_valid[:, None], other=0.0).to(tl.float32)
        rstd = (1.0 / tl.sqrt(tl.sum(x * x, 1) / HEAD_DIM + eps))[:, None]
        n = ((x * rstd).to(dt).to(tl.float32) * tl.load(qw_ptr + offs_d).to(tl.float32)[None, :])
        n = n.to(dt).to(tl.float32)
        xs = tl.load(q_rows[:, None] + swap[None, :], mask=m_valid[:, None], other=0.0).to(tl.float32)
        ns = ((xs * rstd).to(dt).to(tl.float32) * tl.load(qw_ptr + swap).to(tl.float32)[None, :])
        ns = ns.to(dt).to(tl.float32) * tl.where(offs_d < HALF, -1.0, 1.0)[None, :]
        c = tl.load(cos_ptr + pos[:, None] * stride_tab + offs_d[None, :]).to(tl.float32)
        s = tl.load(sin_ptr + pos[:, None] * stride_tab + offs_d[None, :]).to(tl.float32)
        q = (n * c + ns * s).to(dt)
    return q


@triton.jit
def _varlen_gqa_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, cu_ptr, tiles_ptr, qw_ptr, pos_ptr, cos_ptr, sin_ptr,
                           stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
                           stride_tab, eps, qk_scale_log2,
                           STATIC_N_END: tl.constexpr, GROUP: tl.constexpr, HEADS: tl.constexpr,
                           HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                           NORM_Q: tl.constexpr, Q_JOIN: tl.constexpr):
    """One program per (listed tile, HEADS q heads of one kv head): the heads' query tiles are stacked into one
    [HEADS * BLOCK_M, HEAD_DIM] tile, so each K/V tile is loaded once for all of them. NORM_Q: q is the raw
    projection and gets RMSNorm × weight and RoPE as its tile is loaded (once per program, the eager layers'
    roundings); k must already be normalised and rotated (head_norm_rope)."""
    TILE_M: tl.constexpr = HEADS * BLOCK_M
    row = tl.load(tiles_ptr + 2 * tl.program_id(0))
    m_block = tl.load(tiles_ptr + 2 * tl.program_id(0) + 1)
    if row < 0:
        return
    head0 = tl.program_id(2) * HEADS
    start = tl.load(cu_ptr + row)
    seqlen = tl.load(cu_ptr + row + 1) - start
    if m_block * BLOCK_M >= seqlen:
        return
    kv_head = head0 // GROUP
    r = tl.arange(0, TILE_M)
    offs_m = m_block * BLOCK_M + r % BLOCK_M  # [TILE_M]: tile row r is token offs_m of q head `head`
    head = head0 + r // BLOCK_M
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    m_valid = offs_m < seqlen
    tok_m = (start + offs_m).to(tl.int64)
    q_rows = q_ptr + tok_m * stride_qt + head * stride_qh  # [TILE_M]
    if NORM_Q:
        q = _norm_rope_q_tile(q_rows, m_valid, tok_m, qw_ptr, pos_ptr, cos_ptr, sin_ptr, stride_tab, eps,
                              HEAD_DIM, TILE_M, Q_JOIN)
    else:
        q = tl.load(q_rows[:, None] + offs_d[None, :], mask=m_valid[:, None], other=0.0)  # [TILE_M, HEAD_DIM]
    m_i = tl.full([TILE_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([TILE_M], dtype=tl.float32)
    acc = tl.zeros([TILE_M, HEAD_DIM], dtype=tl.float32)
    k_base = k_ptr + kv_head * stride_kh
    v_base = v_ptr + kv_head * stride_vh
    if STATIC_N_END == 0:
        for n0 in range(0, seqlen, BLOCK_N):
            m_i, l_i, acc = _attend_block(q, k_base, v_base, stride_kt, stride_vt, start, seqlen, n0, offs_n,
                                          offs_d, qk_scale_log2, m_i, l_i, acc)
    else:
        for n0 in range(0, STATIC_N_END, BLOCK_N):
            m_i, l_i, acc = _attend_block(q, k_base, v_base, stride_kt, stride_vt, start, seqlen, n0, offs_n,
                                          offs_d, qk_scale_log2, m_i, l_i, acc)
    out = acc / l_i[:, None]
    tl.store(o_ptr + tok_m[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :],
             out.to(o_ptr.dtype.element_ty), mask=m_valid[:, None])


def attention_tiles(cu_seqlens: torch.Tensor, max_tiles: int, block_m: int = 64) -> torch.Tensor:
    """(row, m_block) work list [max_tiles, 2] int32 for varlen_attention, built on the device with fixed
    shapes (no host sync; graph-capturable). max_tiles ≥ num_tokens / block_m + num_rows always suffices."""
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).long()  # [R]
    blocks = (lengths + block_m - 1) // block_m
    ends = blocks.cumsum(0)  # [R] tile index where each row's tiles end
    slot = torch.arange(max_tiles, device=cu_seqlens.device)
    row = torch.searchsorted(ends, slot, right=True)  # [max_tiles]
    used = slot < ends[-1]
    row_c = row.clamp(max=lengths.numel() - 1)
    m_block = slot - (ends[row_c] - blocks[row_c])
    return torch.stack((torch.where(used, row_c, -1), torch.where(used, m_block, 0)), 1).to(torch.int32)


def max_attention_tiles(num_tokens: int, num_rows: int, block_m: int = 64) -> int:
    return -(-num_tokens // block_m) + num_rows


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                     max_seqlen: int, scale: float | None = None, out: torch.Tensor | None = None,
                     tiles: torch.Tensor | None = None, block_m: int = 64, block_n: int = 64,
                     num_warps: int = 4, num_stages: int = 2, heads_per_program: int = 1) -> torch.Tensor:
    """cu_seqlens [num_rows + 1] int32 on q's device; max_seqlen ≥ every row's length (a graph bucket bound).

    tiles: a work list from attention_tiles (same block_m), one program per real tile; built here when None.
    q and k are used as they are (already normalised and rotated); varlen_attention_gqa with heads_per_program
    q heads per program (1: each head alone). Returns o [num_tokens, num_q_heads, head_dim] (rows' tokens only;
    tokens past cu_seqlens[-1] are left as they were in `out`).
    """
    if tiles is None and cu_seqlens.numel() > 1:
        tiles = attention_tiles(cu_seqlens, max_attention_tiles(q.shape[0], cu_seqlens.numel() - 1, block_m),
                                block_m)
    if tiles is None:  # no rows
        return torch.empty_like(q) if out is None else out
    return varlen_attention_gqa(q, k, v, cu_seqlens, max_seqlen, tiles, scale=scale, out=out,
                                heads_per_program=heads_per_program, block_m=block_m, block_n=block_n,
                                num_warps=num_warps, num_stages=num_stages)


def varlen_attention_rope(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                          max_seqlen: int, tiles: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                          positions: torch.Tensor, cos_table: torch.Tensor, sin_table: torch.Tensor, eps: float,
                          scale: float | None = None, out: torch.Tensor | None = None, block_m: int = 64,
                          block_n: int = 32, num_warps: int = 4, num_stages: int = 3) -> torch.Tensor:
    """varlen_attention(qk_norm_rope(q, k)) in one kernel: q/k are the raw projections (not modified);
    positions [num_tokens] index cos/sin tables [max_position, head_dim] (rotate-half layout, fp32)."""
    _, num_q_heads, head_dim = q.shape
    num_kv_heads = k.shape[1]
    assert num_q_heads % num_kv_heads == 0 and q.stride(2) == 1 and k.stride(2) == 1 and v.stride(2) == 1
    assert cos_table.stride(1) == 1 and sin_table.stride(1) == 1 and cos_table.stride(0) == sin_table.stride(0)
    out = torch.empty_like(q) if out is None else out
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    if cu_seqlens.numel() <= 1 or max_seqlen <= 0:
        return out
    _varlen_rope_fwd_kernel[(tiles.shape[0], 1, num_q_heads)](
        q, k, v, out, cu_seqlens, tiles, q_weight, k_weight, positions, cos_table, sin_table,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        out.stride(0), out.stride(1), cos_table.stride(0), eps, scale * 1.4426950408889634,
        STATIC_N_END=max_seqlen if triton.knobs.runtime.interpret else 0, GROUP=num_q_heads // num_kv_heads,
        HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps, num_stages=num_stages)
    return out


def _heads_per_program(num_q_heads: int, num_kv_heads: int, heads_per_program: int | None) -> int:
    group = num_q_heads // num_kv_heads
    if heads_per_program is None:  # the whole GQA group when it stacks into a power-of-two tile
        return group if group & (group - 1) == 0 else 1
    assert heads_per_program >= 1 and group % heads_per_program == 0, "heads_per_program must divide the group"
    assert heads_per_program & (heads_per_program - 1) == 0, "heads_per_program must be a power of two"
    return heads_per_program


def varlen_attention_gqa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                         max_seqlen: int, tiles: torch.Tensor, q_weight: torch.Tensor | None = None,
                         positions: torch.Tensor | None = None, cos_table: torch.Tensor | None = None,
                         sin_table: torch.Tensor | None = None, eps: float = 1e-6, scale: float | None = None,
                         out: torch.Tensor | None = None, heads_per_program: int | None = None,
                         block_m: int = 64, block_n: int = 32, num_warps: int = 4, num_stages: int = 3,
                         q_rope_join: bool = True) -> torch.Tensor:
    """varlen_attention with the q heads of one kv head sharing a program (each K/V tile loaded once for all of
    them; heads_per_program None = the whole group when it is a power of two). tiles from attention_tiles with
    the same block_m (the per-head tile height). q_weight given: q is the RAW projection (read, not modified)
    and is normalised × q_weight and rotated at positions [num_tokens] with the fp32 cos/sin tables
    [max_position, head_dim] as it loads; k must then already hold rope(rms_norm(k) * k_weight). q_rope_join:
    how the query tile is rotated (see _norm_rope_q_tile; the two differ in registers and speed only)."""
    _, num_q_heads, head_dim = q.shape
    num_kv_heads = k.shape[1]
    assert num_q_heads % num_kv_heads == 0 and q.stride(2) == 1 and k.stride(2) == 1 and v.stride(2) == 1
    assert head_dim in (16, 32, 64, 128, 256), "head_dim must be a power of two in 16..256"
    heads = _heads_per_program(num_q_heads, num_kv_heads, heads_per_program)
    norm_q = q_weight is not None
    if norm_q:
        assert positions is not None and cos_table is not None and sin_table is not None
        assert cos_table.stride(1) == 1 and sin_table.stride(1) == 1 and cos_table.stride(0) == sin_table.stride(0)
    out = torch.empty_like(q) if out is None else out
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    if cu_seqlens.numel() <= 1 or max_seqlen <= 0:
        return out
    dummy = cu_seqlens  # stands in for the rope operands when NORM_Q is off (never read)
    _varlen_gqa_fwd_kernel[(tiles.shape[0], 1, num_q_heads // heads)](
        q, k, v, out, cu_seqlens, tiles, q_weight if norm_q else dummy, positions if norm_q else dummy,
        cos_table if norm_q else dummy, sin_table if norm_q else dummy,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        out.stride(0), out.stride(1), cos_table.stride(0) if cos_table is not None else 0, eps,
        scale * 1.4426950408889634,
        STATIC_N_END=max_seqlen if triton.knobs.runtime.interpret else 0, GROUP=num_q_heads // num_kv_heads, HEADS=heads,
        HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, NORM_Q=norm_q, Q_JOIN=q_rope_join,
        num_warps=num_warps, num_stages=num_stages)
    return out


ATTENTION_MODES = ("split", "q_fused", "fused")


def norm_rope_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                        max_seqlen: int, tiles: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                        positions: torch.Tensor, cos_table: torch.Tensor, sin_table: torch.Tensor, eps: float,
                        scale: float | None = None, out: torch.Tensor | None = None, mode: str = "q_fused",
                        heads_per_program: int | None = None, block_m: int = 64, block_n: int = 32,
                        num_warps: int = 4, num_stages: int = 3, k_tokens_per_program: int = 2,
                        angles: tuple[torch.Tensor, torch.Tensor] | None = None,
                        q_rope_join: bool = True) -> torch.Tensor:
    """varlen_attention(qk_norm_rope(q, k)) on the raw projections, by one of ATTENTION_MODES (the signature
    of varlen_attention_rope plus the strategy; tiles from attention_tiles with the same block_m):

    split   — qk_norm_rope rewrites q and k in place, then attention (heads_per_program q heads per program;
              1: each head alone, the old bulk path). angles: the per-token (cos, sin)
              [num_tokens, head_dim] gathered once per forward; else gathered from the tables here.
    q_fused — head_norm_rope rewrites k only (in place); the attention kernel normalises and rotates each
              query tile as it loads it (q is not modified; q_rope_join: how, see _norm_rope_q_tile); GQA
              sharing as in split.
    fused   — varlen_attention_rope: q and k untouched, every K tile re-normalised per query tile and head
              (cheapest at small token counts only).
    """
    if mode == "fused":
        return varlen_attention_rope(q, k, v, cu_seqlens, max_seqlen, tiles, q_weight, k_weight, positions,
                                     cos_table, sin_table, eps, scale=scale, out=out, block_m=block_m,
                                     block_n=block_n, num_warps=num_warps, num_stages=num_stages)
    heads = _heads_per_program(q.shape[1], k.shape[1], heads_per_program)
    if mode == "split":
        cos, sin = (cos_table[positions], sin_table[positions]) if angles is None else angles  # [N, D]
        qk_norm_rope(q, k, q_weight, k_weight, cos, sin, eps)
        return varlen_attention_gqa(q, k, v, cu_seqlens, max_seqlen, tiles, scale=scale, out=out,
                                    heads_per_program=heads, block_m=block_m, block_n=block_n,
                                    num_warps=num_warps, num_stages=num_stages)
    if mode == "q_fused":
        head_norm_rope(k, k_weight, positions, cos_table, sin_table, eps, tokens_per_program=k_tokens_per_program)
        return varlen_attention_gqa(q, k, v, cu_seqlens, max_seqlen, tiles, q_weight, positions, cos_table,
                                    sin_table, eps, scale=scale, out=out, heads_per_program=heads,
                                    block_m=block_m, block_n=block_n, num_warps=num_warps, num_stages=num_stages,
                                    q_rope_join=q_rope_join)
    raise ValueError(f"attention mode must be one of {ATTENTION_MODES}, got {mode!r}")


def varlen_attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                         max_seqlen: int, scale: float | None = None) -> torch.Tensor:
    """One SDPA call per row (slow, exact semantics)."""
    group = q.shape[1] // k.shape[1]
    out = torch.zeros_like(q)
    bounds = cu_seqlens.tolist()
    for start, end in itertools.pairwise(bounds):
        if end <= start:
            continue
        qr = q[start:end].transpose(0, 1)  # [heads, len, head_dim]
        kr = k[start:end].transpose(0, 1).repeat_interleave(group, 0)
        vr = v[start:end].transpose(0, 1).repeat_interleave(group, 0)
        o = torch.nn.functional.scaled_dot_product_attention(qr[None], kr[None], vr[None], scale=scale)[0]
        out[start:end] = o.transpose(0, 1)
    return out
