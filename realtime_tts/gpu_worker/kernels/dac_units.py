"""One Triton program per (batch item, T tile) for a whole DAC residual unit over channels-last activations: the
dilated 7-tap conv, its bias, Snake, the 1x1 conv, its bias, the residual add and the next Snake in one pass.

Worker processes only (torch, triton); never edits or imports from transformers' modeling files.
"""
# @triton.jit kernels are untyped by nature:
# mypy: disable-error-code="untyped-decorator,no-untyped-def"

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from realtime_tts.gpu_worker.kernels.module_switch import derived, drop_derived
from realtime_tts.gpu_worker.kernels.snake import _INTERPRET, snake_ref, snake_values

# Above this many channels a unit's weights (7·C·C fp32 taps + C·C) no longer fit one program's registers and
# shared memory: those units stay on cuDNN + the epilogue kernel.
MAX_UNIT_CHANNELS = 64


@dataclass(frozen=True)
class UnitLaunch:
    """Launch constants of the residual-unit kernel."""

    t_block: int = 128  # output samples per program
    num_warps: int = 4
    num_stages: int = 1


# By channel tile (block_channels). Picked from the sm_90 builds (tests/gpu_worker/test_dac_units.py): every option
# below builds without spills; at C=32, T_BLOCK 128 with 4 warps needs 244 registers a thread (the 7 tap loads
# are all in flight), with 8 warps 128; at C=64, 128/4 spills, 128/8 sits at 255 registers, 64/4 takes 186.
# On the H200, T_BLOCK 64 / 4 warps or 128 / 8 warps for every channel count decoded within 1 ms of this table
# (96 ms per 128 six-second grids; bench/results/omnivoice_bench_h200.md, and bulk run 19 in HISTORY.md there).
UNIT_LAUNCH: dict[int, UnitLaunch] = {16: UnitLaunch(128, 4), 32: UnitLaunch(128, 8), 64: UnitLaunch(64, 4)}


# Per program: T_BLOCK output samples of one batch item, all channels (padded to BLOCK_C, a power of two >= 16 for
# tl.dot; the padded weight rows/columns are zero, so padded channels stay 0 up to the stores, which mask them).
# conv1 (KSIZE taps, dilation DIL, zero padding PAD each side) is KSIZE shifted [T_BLOCK, C] loads of act, each
# times its [C, C] tap matrix, summed in fp32 (TF32 inputs on CUDA, as cuDNN's TF32 convs; fp32 in the
# interpreter). Then the fp32 ops in the unfused decoder's order: h = conv1 + b1; g = snake(h); v = conv2(g) + b2;
# v = skip + v (the conv_epilogue order); raw = v; y = snake_next(v).
# HAS_LEN (a padded codec batch): y is 0 past item b's valid length, len_ptr[b] · len_scale samples.
@triton.jit(do_not_specialize=["length", "dilation", "padding", "len_scale"])
def _res_unit_kernel(act_ptr, skip_ptr, w1_ptr, b1_ptr, alpha2_ptr, w2_ptr, b2_ptr, alpha_next_ptr, raw_ptr, y_ptr,
                     len_ptr, length, dilation, padding, len_scale, stride_ab, stride_at, stride_sb, stride_st,
                     stride_rb, stride_rt, stride_yb, stride_yt, C: tl.constexpr, BLOCK_C: tl.constexpr,
                     KSIZE: tl.constexpr, WRITE_RAW: tl.constexpr, HAS_LEN: tl.constexpr, T_BLOCK: tl.constexpr,
                     PRECISE_SIN: tl.constexpr):
    b = tl.program_id(1).to(tl.int64)
    t = tl.program_id(0) * T_BLOCK + tl.arange(0, T_BLOCK)  # [T_BLOCK] output samples
    ch = tl.arange(0, BLOCK_C)  # [BLOCK_C]
    ch_ok = ch < C
    w_offs = ch[:, None] * BLOCK_C + ch[None, :]  # [BLOCK_C, BLOCK_C] (in, out)
    acc = tl.zeros([T_BLOCK, BLOCK_C], dtype=tl.float32)
    for k in tl.static_range(KSIZE):
        t_in = t + (k * dilation - padding)  # the tap's input samples; outside [0, length): the conv's zero padding
        ok = (t_in >= 0) & (t_in < length)
        a = tl.load(act_ptr + b * stride_ab + t_in.to(tl.int64)[:, None] * stride_at + ch[None, :],
                    mask=ok[:, None] & ch_ok[None, :], other=0.0)  # [T_BLOCK, BLOCK_C]
        w = tl.load(w1_ptr + k * BLOCK_C * BLOCK_C + w_offs)  # [BLOCK_C, BLOCK_C]
        acc = tl.dot(a, w, acc, input_precision="tf32")
    b1 = tl.load(b1_ptr + ch, mask=ch_ok, other=0.0)
    alpha2 = tl.load(alpha2_ptr + ch, mask=ch_ok, other=1.0)
    g = snake_values(acc + b1[None, :], alpha2[None, :], PRECISE_SIN)  # [T_BLOCK, BLOCK_C]
    w2 = tl.load(w2_ptr + w_offs)
    out = tl.dot(g, w2, input_precision="tf32")  # [T_BLOCK, BLOCK_C]
    t_ok = t < length
    mask = t_ok[:, None] & ch_ok[None, :]
    t64 = t.to(tl.int64)[:, None]
    b2 = tl.load(b2_ptr + ch, mask=ch_ok, other=0.0)
    skip = tl.load(skip_ptr + b * stride_sb + t64 * stride_st + ch[None, :], mask=mask, other=0.0)
    v = skip + (out + b2[None, :])
    if WRITE_RAW:  # the next unit's skip
        tl.store(raw_ptr + b * stride_rb + t64 * stride_rt + ch[None, :], v, mask=mask)
    alpha_next = tl.load(alpha_next_ptr + ch, mask=ch_ok, other=1.0)
    y = snake_values(v, alpha_next[None, :], PRECISE_SIN)
    if HAS_LEN:
        valid = tl.load(len_ptr + b) * len_scale
        y = tl.where((t.to(tl.int64) < valid)[:, None], y, 0.0)
    tl.store(y_ptr + b * stride_yb + t64 * stride_yt + ch[None, :], y, mask=mask)


def block_channels(num_channels: int) -> int:
    """The kernel's channel tile for C channels: a power of two, at least 16 (tl.dot's smallest K)."""
    return max(16, int(triton.next_power_of_2(num_channels)))


def unit_fits(unit: Any) -> bool:
    """Whether a DacResidualUnit (Conv1d conv1 dilated 'same', 1x1 conv2, C -> C, stride 1, one group, zero
    padding) takes the kernel: C <= MAX_UNIT_CHANNELS."""
    c1, c2 = unit.conv1, unit.conv2
    if not all(type(c) is torch.nn.Conv1d and c.padding_mode == "zeros" and c.groups == 1 and c.stride == (1,)
               and not isinstance(c.padding, str) and c.bias is not None for c in (c1, c2)):
        return False
    channels = c1.in_channels
    k = c1.kernel_size[0]
    same = 2 * c1.padding[0] == c1.dilation[0] * (k - 1)  # output length = input length
    return bool(channels <= MAX_UNIT_CHANNELS and c1.out_channels == channels == c2.in_channels == c2.out_channels
                and same and c2.kernel_size == (1,) and c2.padding == (0,))


_WEIGHTS = "_fused_unit_weights"


def unit_weights(unit: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(w1 [K, BLOCK_C, BLOCK_C] (tap, in, out), w2 [BLOCK_C, BLOCK_C] (in, out)), zero-padded, fp32, contiguous:
    made once and cached on the unit (module_switch.derived), remade if a weight changes."""
    w1, w2 = unit.conv1.weight, unit.conv2.weight  # [C, C, K], [C, C, 1]

    def make() -> tuple[torch.Tensor, torch.Tensor]:
        channels, _, taps = w1.shape
        block = block_channels(channels)
        p1 = torch.zeros(taps, block, block, dtype=torch.float32, device=w1.device)  # [K, in, out]
        p1[:, :channels, :channels] = w1.detach().permute(2, 1, 0)
        p2 = torch.zeros(block, block, dtype=torch.float32, device=w2.device)  # [in, out]
        p2[:channels, :channels] = w2.detach()[:, :, 0].t()
        return p1, p2

    return derived(unit, _WEIGHTS, (w1, w2), make)


def drop_unit_weights(unit: Any) -> None:
    drop_derived(unit, _WEIGHTS)


def center_crop(skip: torch.Tensor, length: int) -> torch.Tensor:
    """A residual unit's skip input [B, C, T'] cut to its output's length T (T' >= T) at the centre, as
    DacResidualUnit does (a view: read in place)."""
    crop = (skip.shape[-1] - length) // 2
    return skip[..., crop:-crop] if crop > 0 else skip


def _flat(p: torch.Tensor) -> torch.Tensor:
    return p.reshape(-1).contiguous()


def residual_unit(unit: Any, act: torch.Tensor, skip: torch.Tensor, alpha_next: torch.Tensor,
                  keep_raw: bool = True, launch: UnitLaunch | None = None, lengths: torch.Tensor | None = None,
                  scale: int = 1) -> tuple[torch.Tensor | None, torch.Tensor]:
    """act: [B, C, T] in [B, T, C] memory (snake1 of the unit's input, made by the previous epilogue); skip: the raw
    unit input [B, C, T'] with unit channel stride (T' >= T: cropped to the centre as DAC does, read in place);
    alpha_next: [1, C, 1], the Snake after this unit → (raw, y): raw = skip + (conv2(snake2(conv1(act) + b1)) + b2)
    (None unless keep_raw), y = snake_next(raw), both [B, C, T] in [B, T, C] memory. lengths [B] int64 (a padded
    codec batch): y is 0 past sample lengths[b] · scale of item b. No host syncs."""
    num_batch, channels, length = act.shape
    launch = launch or UNIT_LAUNCH[block_channels(channels)]
    if lengths is not None:
        assert lengths.dtype == torch.int64 and lengths.numel() == num_batch
    assert act.stride(1) == 1 and skip.stride(1) == 1, "act and skip must be channels-last ([B, T, C] memory)"
    assert act.dtype == skip.dtype == torch.float32
    skip = center_crop(skip, length)
    assert skip.shape == act.shape, f"skip {tuple(skip.shape)} does not match act {tuple(act.shape)}"
    w1, w2 = unit_weights(unit)
    c1 = unit.conv1
    y = torch.empty(num_batch, length, channels, dtype=act.dtype, device=act.device).transpose(1, 2)  # [B, C, T]
    raw = torch.empty_like(y) if keep_raw else None  # [B, C, T], [B, T, C] memory
    raw_arg = raw if raw is not None else y
    if y.numel():
        grid = (triton.cdiv(length, launch.t_block), num_batch)
        _res_unit_kernel[grid](
            act, skip, w1, _flat(c1.bias), _flat(unit.snake2.alpha), w2, _flat(unit.conv2.bias), _flat(alpha_next),
            raw_arg, y, lengths if lengths is not None else y, length, c1.dilation[0], c1.padding[0], scale,
            act.stride(0), act.stride(2), skip.stride(0), skip.stride(2), raw_arg.stride(0), raw_arg.stride(2),
            y.stride(0), y.stride(2), C=channels, BLOCK_C=w2.shape[0], KSIZE=c1.kernel_size[0], WRITE_RAW=keep_raw,
            HAS_LEN=lengths is not None, T_BLOCK=launch.t_block,
            PRECISE_SIN=not _INTERPRET, num_warps=launch.num_warps, num_stages=launch.num_stages,
            enable_fp_fusion=False)
    return raw, y


def residual_unit_ref(unit: Any, act: torch.Tensor, skip: torch.Tensor,
                      alpha_next: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The same unit in plain torch ops (conv1d + bias + Snake + conv1d + bias + skip, then the next Snake)."""
    h = F.conv1d(act, unit.conv1.weight, None, 1, unit.conv1.padding, unit.conv1.dilation) + unit.conv1.bias[:, None]
    g = snake_ref(h, unit.snake2.alpha)
    out = F.conv1d(g, unit.conv2.weight) + unit.conv2.bias[:, None]
    raw = center_crop(skip, out.shape[-1]) + out
    return raw, snake_ref(raw, alpha_next)
