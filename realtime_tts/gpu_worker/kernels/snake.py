"""Snake activation of the codec decoder (DAC's Snake1d: y = x + 1/(alpha + 1e-9) · sin(alpha·x)²) in one pass
over [B, C, T] or [B, T, C] memory (optionally after a conv's bias add and a residual add: dac_decoder's
epilogues), and the switch that points a loaded codec's Snake1d modules at it (or back) in place.

Worker processes only (torch, triton); never edits or imports from transformers' modeling files.
"""
# @triton.jit kernels are untyped by nature:
# mypy: disable-error-code="untyped-decorator,no-untyped-def"

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from realtime_tts.gpu_worker.kernels.module_switch import ForwardSwitch

# Triton's interpreter has no libdevice: there the kernel takes tl.sin (numpy's sin), on CUDA it takes
# libdevice's __nv_sinf, the same full-precision sinf torch's eager sin calls.
_INTERPRET = triton.knobs.runtime.interpret  # Triton's own reading of TRITON_INTERPRET


@triton.jit
def snake_values(x, alpha, PRECISE_SIN: tl.constexpr):
    """The Snake arithmetic: x and alpha in fp32 (alpha broadcast per channel) → x + 1/(alpha + 1e-9) · sin(alpha·x)², in the eager module's op
    order and roundings: reciprocal(alpha + 1e-9) (IEEE division, as torch's), sin(alpha·x), squared by a product
    (torch's pow(2)), times the reciprocal, plus x (launch with LAUNCH_OPTIONS: no FMA contraction)."""
    inv = tl.math.div_rn(tl.full(alpha.shape, 1.0, tl.float32), alpha + 1e-9)
    ax = alpha * x
    if PRECISE_SIN:
        s = libdevice.sin(ax)
    else:
        s = tl.sin(ax)
    return x + inv * (s * s)


# The codec decoder's convs run, per conv: cuDNN's conv, then `out.add_(bias)` (PyTorch adds a cuDNN conv's bias
# as a separate broadcast add), then (residual units) `skip + out`, then the next Snake1d. With HAS_BIAS /
# HAS_SKIP this kernel does those fp32 operations in the same order on values that stay in registers
# (v = x + bias; v = skip + v; y = snake(v)), WRITE_RAW also storing v; with neither it is the plain Snake.
# A tile is BLOCK_R rows × BLOCK_C unit-stride columns. CHANNELS_LAST off ([B, C, T] memory): a row is one
# (batch, channel), its columns are samples, the per-channel values go by row. On ([B, T, C] memory, the
# channels-last decoder's): a row is one (batch, sample), its columns are channels, the per-channel values go by
# column. Sizes are not specialised on (only the tile shape is), so a new codec length compiles no new variant.
# HAS_LEN (a padded batch of the codec, model/codec_batch.py): y is 0 past each batch item's valid length,
# len_ptr[b] · len_scale samples (raw is stored as computed).
@triton.jit(do_not_specialize=["num_rows", "rows_per_batch", "num_cols", "len_scale"])
def _snake_kernel(x_ptr, bias_ptr, skip_ptr, alpha_ptr, raw_ptr, y_ptr, len_ptr, num_rows, rows_per_batch, num_cols,
                  len_scale, stride_xb, stride_xr, stride_sb, stride_sr, stride_rb, stride_rr, stride_yb, stride_yr,
                  HAS_BIAS: tl.constexpr, HAS_SKIP: tl.constexpr, WRITE_RAW: tl.constexpr, HAS_LEN: tl.constexpr,
                  CHANNELS_LAST: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
                  PRECISE_SIN: tl.constexpr):
    # Short rows (the decoder's first stages, or few channels) share a program instead of leaving most of its
    # lanes masked.
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)  # [BLOCK_R]
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)  # [BLOCK_C]
    row_ok = rows < num_rows
    col_ok = cols < num_cols
    b = (rows // rows_per_batch).to(tl.int64)
    r = rows % rows_per_batch
    r64 = r.to(tl.int64)
    mask = row_ok[:, None] & col_ok[None, :]
    if CHANNELS_LAST:
        chan = cols[None, :]  # [1, BLOCK_C]
        chan_ok = col_ok[None, :]
    else:
        chan = r[:, None]  # [BLOCK_R, 1]
        chan_ok = row_ok[:, None]
    v = tl.load(x_ptr + (b * stride_xb + r64 * stride_xr)[:, None] + cols[None, :], mask=mask, other=0.0)
    v = v.to(tl.float32)  # [BLOCK_R, BLOCK_C]
    if HAS_BIAS:
        bias = tl.load(bias_ptr + chan, mask=chan_ok, other=0.0).to(tl.float32)
        v = v + bias  # the conv's `output.add_(bias)`
    if HAS_SKIP:
        skip = tl.load(skip_ptr + (b * stride_sb + r64 * stride_sr)[:, None] + cols[None, :], mask=mask, other=0.0)
        v = skip.to(tl.float32) + v  # DacResidualUnit's `hidden_state + output_tensor`
    if WRITE_RAW:  # the pre-activation is also a later residual unit's skip input
        tl.store(raw_ptr + (b * stride_rb + r64 * stride_rr)[:, None] + cols[None, :],
                 v.to(raw_ptr.dtype.element_ty), mask=mask)
    alpha = tl.load(alpha_ptr + chan, mask=chan_ok, other=1.0).to(tl.float32)
    y = snake_values(v, alpha, PRECISE_SIN)
    if HAS_LEN:
        valid = tl.load(len_ptr + b, mask=row_ok, other=0) * len_scale  # [BLOCK_R] samples
        if CHANNELS_LAST:  # a row is one sample
            keep = (r64 < valid)[:, None]
        else:  # the columns are samples
            keep = cols[None, :].to(tl.int64) < valid[:, None]
        y = tl.where(keep, y, 0.0)
    tl.store(y_ptr + (b * stride_yb + r64 * stride_yr)[:, None] + cols[None, :], y.to(y_ptr.dtype.element_ty),
             mask=mask)


# enable_fp_fusion=False: no multiply-add contraction; torch rounds the product before the add, so do we.
LAUNCH_OPTIONS = {"num_warps": 4, "enable_fp_fusion": False}
# Elements per program. The interpreter runs programs one at a time in Python (~20 ms each), so it gets
# big tiles (tests pass tile= to cross tile edges anyway).
_TILE = 16384 if _INTERPRET else 1024


def unit_stride(t: torch.Tensor, dim: int = 2) -> torch.Tensor:
    """t [B, C, T] itself when its `dim` (2: samples, 1: channels, the channels-last layout) is unit-stride (the
    other dims may be strided: a view cut along T is fine), else a copy with `dim` fastest."""
    if t.stride(dim) == 1 or t.shape[dim] == 1:
        return t
    if dim == 2:
        return t.contiguous()
    return t.transpose(1, 2).contiguous().transpose(1, 2)


def _channel_block(num_channels: int, tile: int) -> int:
    """Channels per tile in the channels-last layout: the largest power of two dividing C, up to 128 (DAC's
    3·2^k channel counts: no masked lanes; 4×256 tiles spill on sm_90), or C rounded up to a power of two (at
    most 128) when that divisor is small."""
    low = num_channels & -num_channels
    block = min(low, 128) if low >= 32 else min(128, max(16, triton.next_power_of_2(num_channels)))
    return min(tile, block)


def launch_snake(x: torch.Tensor, alpha: torch.Tensor, y: torch.Tensor, tile: int = _TILE,
                 bias: torch.Tensor | None = None, skip: torch.Tensor | None = None,
                 raw: torch.Tensor | None = None, channels_last: bool = False,
                 lengths: torch.Tensor | None = None, scale: int = 1) -> None:
    """y ← snake(v) with v = skip + (x + bias) (each part when given), raw ← v when given. x, y, skip, raw:
    [B, C, T] with unit sample stride, or with channels_last unit channel stride ([B, T, C] memory); the other
    dims may be strided (a view cut along T). alpha, bias: [C] contiguous. lengths: [B] int64 on x's device (a
    padded codec batch): y is 0 past sample lengths[b] · scale of item b. No host syncs: safe inside CUDA graph
    capture once the kernel is compiled."""
    num_batch, num_channels, length = x.shape
    if not y.numel():
        return
    if channels_last:
        rows_per_batch, num_cols, row_dim = length, num_channels, 2
        block_c = _channel_block(num_channels, tile)
    else:
        # Rows shorter than the tile (the decoder's first stages: ~150 samples at 6 s) share a program; five tile
        # shapes in all (64-1024 samples wide).
        rows_per_batch, num_cols, row_dim = num_channels, length, 1
        block_c = min(tile, max(64, triton.next_power_of_2(length)))
    block_r = max(1, tile // block_c)
    num_rows = num_batch * rows_per_batch
    grid = (triton.cdiv(num_rows, block_r), triton.cdiv(num_cols, block_c))
    skip_arg = skip if skip is not None else x  # (unread without a skip, a bias or a raw output)
    raw_arg = raw if raw is not None else y
    if lengths is not None:
        assert lengths.dtype == torch.int64 and lengths.numel() == num_batch
    _snake_kernel[grid](
        x, bias if bias is not None else alpha, skip_arg, alpha, raw_arg, y,
        lengths if lengths is not None else alpha, num_rows, rows_per_batch, num_cols, scale,
        x.stride(0), x.stride(row_dim), skip_arg.stride(0), skip_arg.stride(row_dim), raw_arg.stride(0),
        raw_arg.stride(row_dim), y.stride(0), y.stride(row_dim), HAS_BIAS=bias is not None,
        HAS_SKIP=skip is not None, WRITE_RAW=raw is not None, HAS_LEN=lengths is not None,
        CHANNELS_LAST=channels_last, BLOCK_R=block_r,
        BLOCK_C=block_c, PRECISE_SIN=not _INTERPRET, **LAUNCH_OPTIONS)


def snake(x: torch.Tensor, alpha: torch.Tensor, tile: int = _TILE) -> torch.Tensor:
    """x: [B, C, ...] (trailing dims are flattened as Snake1d does), alpha: [1, C, 1] → a new tensor like x.

    Rows may be strided (a view cut along the last axis is fine); a last axis that is not unit-stride is
    made contiguous first. No host syncs: safe inside CUDA graph capture once the kernel is compiled.
    """
    shape = x.shape
    x3 = unit_stride(x.reshape(shape[0], shape[1], -1))  # [B, C, T]
    num_batch, num_channels, length = x3.shape
    assert alpha.numel() == num_channels, f"alpha has {alpha.numel()} values for {num_channels} channels"
    out = torch.empty(num_batch, num_channels, length, dtype=x.dtype, device=x.device)  # [B, C, T]
    launch_snake(x3, alpha.reshape(num_channels).contiguous(), out, tile)
    return out.view(shape)


def snake_ref(x: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """The eager Snake1d formula, op for op (plain torch)."""
    shape = x.shape
    x3 = x.reshape(shape[0], shape[1], -1)
    y = x3 + (alpha + 1e-9).reciprocal() * torch.sin(alpha * x3).pow(2)
    return y.reshape(shape)


def _fused_forward(self: torch.nn.Module, hidden_states: torch.Tensor) -> torch.Tensor:
    alpha: torch.Tensor = self.alpha  # type: ignore[assignment]
    if hidden_states.is_cuda or _INTERPRET:
        return snake(hidden_states, alpha)
    stock_forward = _SWITCH.stock_class(type(self)).forward  # CPU without the interpreter: transformers' path
    out: torch.Tensor = stock_forward(self, hidden_states)
    return out


_SWITCH = ForwardSwitch(_fused_forward, __name__)


def _is_snake(module: torch.nn.Module) -> bool:
    alpha = getattr(module, "alpha", None)
    return (_SWITCH.stock_class(type(module)).__name__ == "Snake1d" and isinstance(alpha, torch.Tensor)
            and alpha.dim() == 3 and alpha.shape[0] == 1 and alpha.shape[2] == 1)


def use_fused_snake(model: torch.nn.Module, enabled: bool = True) -> int:
    """Switch every Snake1d module under `model` (e.g. a codec's HiggsAudioV2TokenizerModel) to the fused kernel,
    or back to transformers' stock forward with enabled=False → how many modules changed.

    In place, by class: each module becomes an instance of a subclass of its own Snake1d class that only
    overrides forward, so it keeps its alpha Parameter, state-dict keys and isinstance checks. Idempotent.
    """
    return _SWITCH.apply(model, _is_snake, enabled)
