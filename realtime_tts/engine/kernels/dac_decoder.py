"""The codec decoder's conv epilogues in one pass each (a conv's bias add, the residual add, the next Snake), and
the switch that points a loaded codec's DAC decoder at them (or back) in place.

Worker processes only (torch, triton); never edits or imports from transformers' modeling files.
"""
# @triton.jit kernels are untyped by nature:
# mypy: disable-error-code="untyped-decorator,no-untyped-def"

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from realtime_tts.engine.kernels.module_switch import ForwardSwitch
from realtime_tts.engine.kernels.snake import _INTERPRET, _TILE, LAUNCH_OPTIONS, snake_ref, snake_values


# The stock decoder runs, per conv: cuDNN's conv, then `out.add_(bias)` (PyTorch adds a cuDNN conv's bias as a
# separate broadcast add), then (residual units) `skip + out`, then the next Snake1d. This kernel does the same
# fp32 operations in the same order on values that stay in registers: v = x + bias; v = skip + v; y = snake(v).
@triton.jit(do_not_specialize=["num_rows", "num_channels", "length"])
def _conv_epilogue_kernel(x_ptr, bias_ptr, skip_ptr, alpha_ptr, raw_ptr, y_ptr, num_rows, num_channels, length,
                          stride_xb, stride_xc, stride_sb, stride_sc, stride_rb, stride_rc, stride_yb, stride_yc,
                          HAS_BIAS: tl.constexpr, HAS_SKIP: tl.constexpr, WRITE_RAW: tl.constexpr,
                          BLOCK_R: tl.constexpr, BLOCK_T: tl.constexpr, PRECISE_SIN: tl.constexpr):
    # One program: BLOCK_R (batch, channel) rows × BLOCK_T samples, as the Snake kernel tiles.
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)  # [BLOCK_R]
    t = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)  # [BLOCK_T]
    row_ok = rows < num_rows
    b = (rows // num_channels).to(tl.int64)
    c = rows % num_channels
    c64 = c.to(tl.int64)
    mask = row_ok[:, None] & (t < length)[None, :]
    v = tl.load(x_ptr + (b * stride_xb + c64 * stride_xc)[:, None] + t[None, :], mask=mask, other=0.0)
    v = v.to(tl.float32)  # [BLOCK_R, BLOCK_T]
    if HAS_BIAS:
        bias = tl.load(bias_ptr + c, mask=row_ok, other=0.0).to(tl.float32)[:, None]  # [BLOCK_R, 1]
        v = v + bias  # the conv's `output.add_(bias)`
    if HAS_SKIP:
        skip = tl.load(skip_ptr + (b * stride_sb + c64 * stride_sc)[:, None] + t[None, :], mask=mask, other=0.0)
        v = skip.to(tl.float32) + v  # DacResidualUnit's `hidden_state + output_tensor`
    if WRITE_RAW:  # the pre-activation is also a later residual unit's skip input
        tl.store(raw_ptr + (b * stride_rb + c64 * stride_rc)[:, None] + t[None, :],
                 v.to(raw_ptr.dtype.element_ty), mask=mask)
    # Snake1d, the Snake kernel's arithmetic (bit-identical to the eager module on the H200)
    alpha = tl.load(alpha_ptr + c, mask=row_ok, other=1.0).to(tl.float32)[:, None]  # [BLOCK_R, 1]
    y = snake_values(v, alpha, PRECISE_SIN)
    tl.store(y_ptr + (b * stride_yb + c64 * stride_yc)[:, None] + t[None, :], y.to(y_ptr.dtype.element_ty),
             mask=mask)


def _unit_stride(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(2) == 1 or t.shape[2] == 1 else t.contiguous()


def conv_epilogue(x: torch.Tensor, bias: torch.Tensor | None, alpha: torch.Tensor, skip: torch.Tensor | None = None,
                  keep_raw: bool = False, inplace: bool = False,
                  tile: int = _TILE) -> tuple[torch.Tensor | None, torch.Tensor]:
    """x: [B, C, T] a conv's output without its bias; bias: [C] or None; alpha: [1, C, 1]; skip: [B, C, T] or None
    → (raw, y): raw = skip + (x + bias) (None unless keep_raw), y = snake(raw).

    inplace=True: x is the caller's scratch (a conv output nobody else holds) and takes raw, or y when raw is not
    kept. Rows of x and skip may be strided (a view cut along the last axis). No host syncs.
    """
    assert x.dim() == 3, f"x must be [B, C, T], got {tuple(x.shape)}"
    num_batch, num_channels, length = x.shape
    x = _unit_stride(x)  # a copy, if one is made, is scratch too
    assert alpha.numel() == num_channels, f"alpha has {alpha.numel()} values for {num_channels} channels"
    alpha_flat = alpha.reshape(num_channels).contiguous()
    bias_flat = bias.reshape(num_channels).contiguous() if bias is not None else alpha_flat  # unread without bias
    if skip is not None:
        assert skip.shape == x.shape, f"skip {tuple(skip.shape)} does not match x {tuple(x.shape)}"
        skip = _unit_stride(skip)
    raw = (x if inplace else torch.empty_like(x)) if keep_raw else None  # [B, C, T]
    y = x if inplace and not keep_raw else torch.empty_like(x)  # [B, C, T]
    num_rows = num_batch * num_channels
    if y.numel():
        block_t = min(tile, max(64, triton.next_power_of_2(length)))
        block_r = tile // block_t
        grid = (triton.cdiv(num_rows, block_r), triton.cdiv(length, block_t))
        skip_arg = skip if skip is not None else x
        raw_arg = raw if raw is not None else y
        _conv_epilogue_kernel[grid](
            x, bias_flat, skip_arg, alpha_flat, raw_arg, y, num_rows, num_channels, length,
            x.stride(0), x.stride(1), skip_arg.stride(0), skip_arg.stride(1), raw_arg.stride(0), raw_arg.stride(1),
            y.stride(0), y.stride(1), HAS_BIAS=bias is not None, HAS_SKIP=skip is not None, WRITE_RAW=keep_raw,
            BLOCK_R=block_r, BLOCK_T=block_t, PRECISE_SIN=not _INTERPRET, **LAUNCH_OPTIONS)
    return raw, y


def conv_epilogue_ref(x: torch.Tensor, bias: torch.Tensor | None, alpha: torch.Tensor,
                      skip: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The stock decoder's ops (plain torch): (raw, snake(raw)) with raw = skip + (x + bias)."""
    raw = x.clone()
    if bias is not None:
        raw.add_(bias.reshape(1, -1, 1))
    if skip is not None:
        raw = skip + raw
    return raw, snake_ref(raw, alpha)


# ------------------------------------------------------------------------------------------------ the decoder


def _conv(conv: Any, x: torch.Tensor) -> torch.Tensor:
    """The module's conv without its bias (the epilogue adds it): the same cuDNN call the stock forward makes,
    which then adds the bias in a separate kernel."""
    if conv.transposed:  # ConvTranspose1d (checked by _is_dac_decoder)
        output_padding = conv._output_padding(x, None, conv.stride, conv.padding, conv.kernel_size, 1, conv.dilation)
        return F.conv_transpose1d(x, conv.weight, None, conv.stride, conv.padding, output_padding, conv.groups,
                                  conv.dilation)
    out: torch.Tensor = conv._conv_forward(x, conv.weight, None)
    return out


def _units(block: Any) -> list[Any]:
    return [block.res_unit1, block.res_unit2, block.res_unit3]


def _fused_forward(self: Any, hidden_state: torch.Tensor) -> torch.Tensor:
    if not (hidden_state.is_cuda or _INTERPRET) or hidden_state.dtype != torch.float32:
        # CPU without the interpreter, or another dtype (the stock ops would round between ops): stock path
        stock: torch.Tensor = _SWITCH.stock_class(type(self)).forward(self, hidden_state)
        return stock
    blocks: list[Any] = list(self.block)
    # Every Snake1d's alpha in the order the decoder applies them; each conv's epilogue ends in the next one.
    alphas = [m.alpha for blk in blocks for m in [blk.snake1] + [s for u in _units(blk) for s in (u.snake1, u.snake2)]]
    alphas.append(self.snake1.alpha)
    nxt = iter(alphas)
    _, act = conv_epilogue(_conv(self.conv1, hidden_state), self.conv1.bias, next(nxt), inplace=True)  # [B, C0, T]
    for blk in blocks:
        # the upsampling conv's output is both the first unit's Snake input and its skip
        skip, act = conv_epilogue(_conv(blk.conv_t1, act), blk.conv_t1.bias, next(nxt), keep_raw=True,
                                  inplace=True)  # [B, C, T·stride] each
        units = _units(blk)
        for i, unit in enumerate(units):
            _, act = conv_epilogue(_conv(unit.conv1, act), unit.conv1.bias, next(nxt), inplace=True)
            out = _conv(unit.conv2, act)  # [B, C, T']
            assert skip is not None
            padding = (skip.shape[-1] - out.shape[-1]) // 2
            if padding > 0:
                skip = skip[..., padding:-padding]
            # the last unit's sum only feeds the next block's (or the decoder's) Snake: not stored
            skip, act = conv_epilogue(out, unit.conv2.bias, next(nxt), skip=skip, keep_raw=i < len(units) - 1,
                                      inplace=True)
    hidden_state = self.conv2(act)  # stock, bias and all: its 1-channel output is the waveform
    out_wave: torch.Tensor = self.tanh(hidden_state)
    return out_wave


_SWITCH = ForwardSwitch(_fused_forward, __name__)


def _is_snake(m: object, channels: int) -> bool:
    alpha = getattr(m, "alpha", None)
    return isinstance(alpha, torch.Tensor) and tuple(alpha.shape) == (1, channels, 1)


def _is_conv(m: Any, transposed: bool = False) -> bool:
    kind = torch.nn.ConvTranspose1d if transposed else torch.nn.Conv1d
    return type(m) is kind and m.padding_mode == "zeros"


def _is_dac_decoder(module: Any) -> bool:
    """DAC's decoder in exactly the layout the fused forward walks: conv1, blocks of (Snake1d, ConvTranspose1d,
    three residual units of Snake1d, Conv1d, Snake1d, Conv1d), Snake1d, conv2 — all with their stock forwards
    and no hooks (a forward pre-hook, e.g. old-style weight norm, would be skipped by the fused walk)."""
    if _SWITCH.stock_class(type(module)).__name__ != "DacDecoder":
        return False
    if any(m._forward_hooks or m._forward_pre_hooks for m in module.modules()):
        return False
    try:
        blocks = list(module.block)
        if not (blocks and _is_conv(module.conv1) and _is_conv(module.conv2)
                and _is_snake(module.snake1, module.conv2.in_channels)):
            return False
        channels = module.conv1.out_channels
        for blk in blocks:
            if type(blk).__name__ != "DacDecoderBlock" or not (_is_snake(blk.snake1, channels)
                                                               and _is_conv(blk.conv_t1, transposed=True)):
                return False
            channels = blk.conv_t1.out_channels
            for unit in _units(blk):
                if type(unit).__name__ != "DacResidualUnit" or not (
                        _is_snake(unit.snake1, channels) and _is_conv(unit.conv1) and _is_snake(unit.snake2, channels)
                        and _is_conv(unit.conv2) and unit.conv2.out_channels == channels):
                    return False
        return bool(channels == module.conv2.in_channels)
    except AttributeError:
        return False


def use_fused_codec(model: torch.nn.Module, enabled: bool = True) -> int:
    """Switch every DAC decoder under `model` (e.g. a codec's HiggsAudioV2TokenizerModel) to the fused epilogues,
    or back to transformers' stock forward with enabled=False → how many decoders changed.

    In place, by class, as use_fused_snake does: the decoder becomes an instance of a subclass of its own class
    that only overrides forward, so parameters, state-dict keys and isinstance checks stay. Idempotent. The fused
    forward reads the decoder's Snake1d alphas itself, so it does not matter whether use_fused_snake switched
    those modules; the encoder's Snake1d modules are use_fused_snake's alone.
    """
    return _SWITCH.apply(model, _is_dac_decoder, enabled)
