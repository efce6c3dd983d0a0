"""The heavy half of a diffusion step's scoring in one pass per position: classifier-free-guidance combine of
the cond/uncond log-softmaxes, a second log-softmax, MASK excluded, argmax token and its confidence.

Reads the audio head's logits in their own dtype (fp32, or bf16 as the reference's head gives them) and computes
in fp32, as the reference does after `.logits.to(torch.float32)`, so the [B, 8, T, 1025] fp32 intermediates of
the plain version never touch memory. Argmax ties resolve to the lowest id, as torch's do.

Two kernels: "rows" (the default) holds a few positions per program as a [ROWS, 2^k] tile (laid out
[ROWS, 2^k / 32, 32]) with the vocab's last column peeled off as a per-row scalar (1025 = 1024 + 1); "legacy",
one position per program over next_power_of_2(V) lanes (half of them masked at V = 1025), is kept so the bench
can time both.
"""
# @triton.jit kernels are untyped by nature:
# mypy: disable-error-code="untyped-decorator,no-untyped-def"

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _lse(x, valid):
    mx = tl.max(tl.where(valid, x, float("-inf")), axis=0)
    return mx + tl.log(tl.sum(tl.where(valid, tl.exp(x - mx), 0.0), axis=0))


@triton.jit
def _cfg_argmax_kernel(c_ptr, u_ptr, g_ptr, pred_ptr, conf_ptr, stride_c, stride_u, rows_per_item, vocab,
                       mask_id, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    valid = cols < vocab
    c = tl.load(c_ptr + row * stride_c + cols, mask=valid, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + row * stride_u + cols, mask=valid, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + row // rows_per_item)
    c_ls = c - _lse(c, valid)
    u_ls = u - _lse(u, valid)
    z = c_ls + g * (c_ls - u_ls)
    z_ls = z - _lse(z, valid)
    lp = tl.where(g != 0, z_ls, c_ls)
    lp = tl.where(valid & (cols != mask_id), lp, float("-inf"))
    conf = tl.max(lp, axis=0)
    pred = tl.argmax(lp, axis=0, tie_break_left=True)
    tl.store(conf_ptr + row, conf)
    tl.store(pred_ptr + row, pred.to(tl.int64))


# Triton's interpreter runs no inline PTX: there exp is tl.exp (numpy's).
_INTERPRET = triton.knobs.runtime.interpret  # Triton's own reading of TRITON_INTERPRET
_LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _exp(x, FTZ: tl.constexpr):
    # tl.exp is ex2.approx.f32 on x·log2(e), which ptxas wraps in a subnormal range check and two rescales (3 of
    # its 5 SASS instructions per exp); the .ftz form skips them. It differs only where exp(x) < 2^-126, terms that
    # vanish in a sum whose largest term is 1.
    if FTZ:
        return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [x * _LOG2E], dtype=tl.float32,
                                         is_pure=True, pack=1)
    else:
        return tl.exp(x)


@triton.jit
def _row_max(x):
    # [ROWS, K, LANES] → [ROWS]: a thread's own registers first, then across the lanes (shuffles)
    return tl.max(tl.max(x, axis=1), axis=1)


@triton.jit
def _log_softmax_rows(x, x_last, cols_ok, EVEN: tl.constexpr, FTZ: tl.constexpr):
    """log_softmax of each row of a [ROWS, K, LANES] tile (row r's column k·LANES + l at [r, k, l]) plus its
    peeled last column x_last [ROWS], in torch's rounding order ((x - max) - log(sum)) → (like x, [ROWS]).
    Columns outside cols_ok are ignored (their outputs are garbage); EVEN: the tile has none."""
    if EVEN:
        mx = tl.maximum(_row_max(x), x_last)  # [ROWS]
        shifted = x - mx[:, None, None]  # [ROWS, K, LANES]
        s = tl.sum(tl.sum(_exp(shifted, FTZ), axis=1), axis=1)
    else:
        mx = tl.maximum(_row_max(tl.where(cols_ok, x, float("-inf"))), x_last)
        shifted = x - mx[:, None, None]
        s = tl.sum(tl.sum(tl.where(cols_ok, _exp(shifted, FTZ), 0.0), axis=1), axis=1)
    shifted_last = x_last - mx
    log_s = tl.log(s + _exp(shifted_last, FTZ))
    return shifted - log_s[:, None, None], shifted_last - log_s


# Batch sizes and lengths are not specialised on (16-divisibility buys this kernel nothing), so a new
# (B, Tmax) does not compile a new variant in the middle of serving.
@triton.jit(do_not_specialize=["num_rows", "rows_per_item", "mask_id"])
def _cfg_argmax_rows_kernel(c_ptr, u_ptr, g_ptr, pred_ptr, conf_ptr, num_rows, stride_c, stride_u, rows_per_item,
                            mask_id, LAST: tl.constexpr, MAIN: tl.constexpr, LANES: tl.constexpr,
                            ROWS: tl.constexpr, MASK_IS_LAST: tl.constexpr, FTZ: tl.constexpr):
    # ROWS positions per program; columns [0, LAST) in the tile (MAIN = next_power_of_2(LAST) of them) and column
    # LAST = V - 1 as one scalar per row: V = 1025 needs 1024 lanes, not 2048 of which half are masked. With
    # MASK_IS_LAST (OmniVoice's MASK is id 1024) the tile has no column to exclude from the argmax.
    # The tile is [ROWS, MAIN // LANES, LANES], LANES = 32 (a warp) when MAIN allows: the pointers are built as
    # (row + lane) + k·LANES so each thread's loads share one base register with immediate offsets; the flat
    # [ROWS, MAIN] form cost an OR and a 64-bit multiply-add per element loaded (IMAD 91 → 33 per row in SASS).
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)  # [ROWS]
    row_ok = rows < num_rows
    rows = tl.minimum(rows, num_rows - 1)  # a short last program recomputes the last row: loads stay unmasked
    kk = tl.arange(0, MAIN // LANES)[None, :, None] * LANES  # [1, K, 1]
    lane = tl.arange(0, LANES)[None, None, :]  # [1, 1, LANES]
    cols = kk + lane  # [1, K, LANES]
    EVEN: tl.constexpr = MAIN == LAST
    cols_ok = cols < LAST
    c_row = c_ptr + rows * stride_c
    u_row = u_ptr + rows * stride_u
    c_lane = c_row[:, None, None] + lane  # [ROWS, 1, LANES]
    u_lane = u_row[:, None, None] + lane
    if EVEN:
        c = tl.load(c_lane + kk).to(tl.float32)  # [ROWS, K, LANES]
        u = tl.load(u_lane + kk).to(tl.float32)
    else:
        c = tl.load(c_lane + kk, mask=cols_ok, other=0.0).to(tl.float32)
        u = tl.load(u_lane + kk, mask=cols_ok, other=0.0).to(tl.float32)
    c_last = tl.load(c_row + LAST).to(tl.float32)  # [ROWS]
    u_last = tl.load(u_row + LAST).to(tl.float32)
    g = tl.load(g_ptr + rows // rows_per_item)  # [ROWS]
    c_ls, c_ls_last = _log_softmax_rows(c, c_last, cols_ok, EVEN, FTZ)
    u_ls, u_ls_last = _log_softmax_rows(u, u_last, cols_ok, EVEN, FTZ)
    g3 = g[:, None, None]  # [ROWS, 1, 1]
    z = c_ls + g3 * (c_ls - u_ls)
    z_last = c_ls_last + g * (c_ls_last - u_ls_last)
    z_ls, z_ls_last = _log_softmax_rows(z, z_last, cols_ok, EVEN, FTZ)
    lp = tl.where(g3 != 0, z_ls, c_ls)
    if MASK_IS_LAST:
        if not EVEN:
            lp = tl.where(cols_ok, lp, float("-inf"))
    else:
        lp = tl.where(cols_ok & (cols != mask_id), lp, float("-inf"))
    lp_last = tl.where(g != 0, z_ls_last, c_ls_last)
    # argmax as a max then the lowest column holding it: fewer instructions than tl.argmax's (value, index)
    # pairs, the same answer (ties to the lowest id); LAST where nothing matches (NaN rows) keeps ids in range
    conf = _row_max(lp)  # [ROWS]
    pred = tl.min(tl.min(tl.where(lp == conf[:, None, None], cols, LAST), axis=1), axis=1).to(tl.int64)
    # the peeled column has the highest id: it wins only when strictly greater
    if not MASK_IS_LAST:
        take_last = lp_last > conf
        pred = tl.where(take_last, LAST, pred)
        conf = tl.where(take_last, lp_last, conf)
    tl.store(conf_ptr + rows, conf, mask=row_ok)
    tl.store(pred_ptr + rows, pred, mask=row_ok)


CFG_ARGMAX_VARIANTS = ("rows", "legacy")


def cfg_argmax(c_logits: torch.Tensor, u_logits: torch.Tensor, guidance: torch.Tensor, mask_id: int, *,
               variant: str = "rows", rows_per_program: int = 1, num_warps: int = 1, fp_fusion: bool = True
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """c_logits, u_logits [B, R, V] (R positions per item, e.g. T·8), guidance [B] fp32
    → (pred [B, R] int64, conf [B, R] fp32). variant "rows": rows_per_program positions per program of
    num_warps warps (one warp holds whole rows only when num_warps == 1: Triton spreads warps along the columns
    first, and rows spanning warps reduce through shared memory and barriers); "legacy": the one-position
    kernel (num_warps=4, rows_per_program ignored). The default, one row per one-warp program: by ptxas for
    sm_90, 1256 (bf16) / 1192 (fp32) warp instructions per row in 96 registers, no spills (legacy: 5376 and 23
    barriers); two rows per warp save ~6% of those but take 168 registers, fewer resident warps. Chosen without
    a GPU: the bench (bench_cfg_argmax) times them all. fp_fusion=False: no multiply-add contraction (the guidance
    combine then rounds its product before the add, as torch's separate ops do; ~3% more instructions)."""
    num_b, per_item, vocab = c_logits.shape
    assert u_logits.shape == c_logits.shape and c_logits.stride(2) == 1 and u_logits.stride(2) == 1
    if variant not in CFG_ARGMAX_VARIANTS:
        raise ValueError(f"variant must be one of {CFG_ARGMAX_VARIANTS}, got {variant!r}")
    if rows_per_program < 1 or rows_per_program & (rows_per_program - 1):
        raise ValueError(f"rows_per_program must be a power of two, got {rows_per_program}")
    c2 = c_logits.reshape(num_b * per_item, vocab)
    u2 = u_logits.reshape(num_b * per_item, vocab)
    pred = torch.empty(num_b, per_item, dtype=torch.long, device=c_logits.device)
    conf = torch.empty(num_b, per_item, dtype=torch.float32, device=c_logits.device)
    num_rows = num_b * per_item
    if not num_rows:
        return pred, conf
    if variant == "legacy":
        _cfg_argmax_kernel[(num_rows,)](
            c2, u2, guidance, pred, conf, c2.stride(0), u2.stride(0), per_item, vocab, mask_id,
            BLOCK=triton.next_power_of_2(vocab), num_warps=4)
        return pred, conf
    last = vocab - 1
    main = triton.next_power_of_2(max(last, 1))
    _cfg_argmax_rows_kernel[(triton.cdiv(num_rows, rows_per_program),)](
        c2, u2, guidance, pred, conf, num_rows, c2.stride(0), u2.stride(0), per_item, mask_id,
        LAST=last, MAIN=main, LANES=min(main, 32), ROWS=rows_per_program, MASK_IS_LAST=mask_id == last,
        FTZ=not _INTERPRET, num_warps=num_warps, enable_fp_fusion=fp_fusion)
    return pred, conf


def cfg_log_probs_ref(c_logits: torch.Tensor, u_logits: torch.Tensor, guidance: torch.Tensor, mask_id: int,
                      dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """decoding.score's log-probs, computed in dtype: logits [B, ..., V] → [B, ..., V], MASK at -inf."""
    c = torch.log_softmax(c_logits.to(dtype), dim=-1)
    u = torch.log_softmax(u_logits.to(dtype), dim=-1)
    g = guidance.view(-1, *[1] * (c.dim() - 1))  # [B, 1, ..., 1]: any number of position dims
    lp = torch.where(g != 0, torch.log_softmax(c + g * (c - u), dim=-1), c)
    lp[..., mask_id] = float("-inf")
    return lp


def cfg_argmax_ref(c_logits: torch.Tensor, u_logits: torch.Tensor, guidance: torch.Tensor,
                   mask_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """decoding.score's op sequence: logits [B, ..., V] → (argmax [B, ...], max log-prob [B, ...])."""
    lp = cfg_log_probs_ref(c_logits, u_logits, guidance, mask_id)
    return lp.argmax(dim=-1), lp.max(dim=-1).values
