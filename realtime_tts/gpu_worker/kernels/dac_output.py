"""The codec decoder's waveform head in one pass: DAC's last conv (C channels → 1, k taps, zero padding) + its bias,
then (optionally) tanh, over channels-last activations ([B, T, C] memory), written straight into the [B, 1, T]
waveform. (HiggsAudioV2's tokenizer replaces DAC's tanh with an identity: its waveforms are unbounded.)

cuDNN runs that conv as a TF32 implicit GEMM with one output channel (3.6 ms per 128 six-second grids on the
H200, bench/results/omnivoice_profile_h200.txt) where reading its input once takes ~0.7 ms. Worker processes
only (torch, triton).
"""
# @triton.jit kernels are untyped by nature:
# mypy: disable-error-code="untyped-decorator,no-untyped-def"

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.language.extra import libdevice

# Triton's interpreter has no libdevice: there tanh is spelled with exp (same value to a few ulp).
from realtime_tts.gpu_worker.kernels.snake import _INTERPRET


@triton.jit(do_not_specialize=["in_len", "out_len"])
def _wave_head_kernel(act_ptr, w_ptr, bias_ptr, out_ptr, in_len, out_len, stride_ab, stride_at,
                      NUM_CHANNELS: tl.constexpr, KSIZE: tl.constexpr, PAD: tl.constexpr, BLOCK_T: tl.constexpr,
                      BLOCK_C: tl.constexpr, TANH: tl.constexpr, PRECISE_TANH: tl.constexpr):
    # One program: BLOCK_T output samples of one batch item. The k taps are k shifted [BLOCK_T, C] loads of the
    # same rows (L1/L2 hits after the first), each reduced over channels against that tap's weights, in fp32.
    b = tl.program_id(1).to(tl.int64)
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)  # [BLOCK_T]
    c = tl.arange(0, BLOCK_C)
    c_ok = c < NUM_CHANNELS
    acc = tl.zeros([BLOCK_T], dtype=tl.float32)
    for j in range(KSIZE):  # not unrolled: 7 unrolled taps keep every load live at once (spills)
        src = t + (j - PAD)
        ok = (src >= 0) & (src < in_len)  # the conv's zero padding
        x = tl.load(act_ptr + b * stride_ab + src.to(tl.int64)[:, None] * stride_at + c[None, :],
                    mask=ok[:, None] & c_ok[None, :], other=0.0).to(tl.float32)  # [BLOCK_T, BLOCK_C]
        w = tl.load(w_ptr + j * NUM_CHANNELS + c, mask=c_ok, other=0.0).to(tl.float32)  # tap j's weights [BLOCK_C]
        acc += tl.sum(x * w[None, :], 1)
    y = acc + tl.load(bias_ptr).to(tl.float32)
    if TANH:
        if PRECISE_TANH:
            y = libdevice.tanh(y)
        else:
            y = 1.0 - 2.0 / (tl.exp(2.0 * y) + 1.0)
    tl.store(out_ptr + b * out_len + t, y.to(out_ptr.dtype.element_ty), mask=t < out_len)


def tap_weights(weight: torch.Tensor) -> torch.Tensor:
    """A one-output conv's weight [1, C, K] as the kernel reads it: [K, C] contiguous fp32."""
    assert weight.dim() == 3 and weight.shape[0] == 1, f"expected a [1, C, K] weight, got {tuple(weight.shape)}"
    return weight[0].t().contiguous().float()


def wave_head(act: torch.Tensor, taps: torch.Tensor, bias: torch.Tensor, padding: int, tanh: bool = True,
              block_t: int = 128) -> torch.Tensor:
    """act: [B, C, T] with unit channel stride ([B, T, C] memory, any sample stride); taps: tap_weights(conv.weight);
    bias: [1] → tanh(conv1d(act, weight, bias, padding=padding)) (without the tanh when tanh=False) as a new
    contiguous [B, 1, T'] tensor, T' = T + 2·padding − K + 1 (stride 1, no dilation). No host syncs: safe inside
    CUDA graph capture once compiled."""
    num_batch, num_channels, length = act.shape
    ksize = taps.shape[0]
    assert taps.shape[1] == num_channels, f"taps have {taps.shape[1]} channels, act {num_channels}"
    assert act.stride(1) == 1 or num_channels == 1, "act must be channels-last (unit channel stride)"
    assert bias.numel() == 1
    out_len = length + 2 * padding - ksize + 1  # output sample t reads act[t + tap − padding]
    out = torch.empty(num_batch, 1, out_len, dtype=act.dtype, device=act.device)  # [B, 1, T']
    if out.numel() == 0:
        return out
    grid = (triton.cdiv(out_len, block_t), num_batch)
    _wave_head_kernel[grid](act, taps, bias, out, length, out_len, act.stride(0), act.stride(2),
                            NUM_CHANNELS=num_channels, KSIZE=ksize, PAD=padding, BLOCK_T=block_t,
                            BLOCK_C=max(16, triton.next_power_of_2(num_channels)), TANH=tanh,
                            PRECISE_TANH=not _INTERPRET,
                            num_warps=4)
    return out


def wave_head_ref(act: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, padding: int,
                  tanh: bool = True) -> torch.Tensor:
    """The stock ops (plain torch, fp32 without TF32 on CPU): tanh(conv1d(act, weight, bias, padding))."""
    y = F.conv1d(act.float(), weight.float(), bias.float(), padding=padding)
    return (torch.tanh(y) if tanh else y).to(act.dtype)
