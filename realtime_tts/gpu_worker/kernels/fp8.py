"""FP8 projections, an experiment (StepRunner(fp8_matmuls=True), bench/omnivoice_fp8.py; not a server option: see
bench/results/omnivoice_fp8_h200.md): e4m3 weights with one scale per output row, activations quantised per token
on the fly, the product on the tensor cores by torch._scaled_mm with row-wise scales, bf16 out.

quantize_rows(x) is one Triton pass per activation (row max, scale, cast); quantize_weight runs once at load. The
plain-torch references simulate the same rounding on any device (fp8 round trip, then an fp32 matmul) for tests.
What FP8 does to the released model's audio is not known here: only random weights are reachable.
"""
# @triton.jit kernels are untyped by nature:
# mypy: disable-error-code="untyped-decorator,no-untyped-def"

from __future__ import annotations

import torch
import triton
import triton.language as tl

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0  # the largest finite e4m3fn value
_TINY = 1e-12  # a row of zeros gets this scale (quantises to zeros, no division by 0)


@triton.jit
def _quantize_rows_kernel(x_ptr, q_ptr, s_ptr, stride_x, stride_q, width, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < width
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    scale = tl.maximum(tl.max(tl.abs(x), axis=0), 1e-12) / 448.0  # _TINY, FP8_MAX (a jit body reads globals only as tl.constexpr)
    tl.store(q_ptr + row * stride_q + cols, (x / scale).to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(s_ptr + row, scale)


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] (unit column stride) → (e4m3 [M, K], fp32 scales [M, 1]) with x ≈ q × scale per row."""
    assert x.dim() == 2 and x.stride(1) == 1
    m, k = x.shape
    q = torch.empty(m, k, dtype=FP8, device=x.device)
    s = torch.empty(m, 1, dtype=torch.float32, device=x.device)
    if m:
        block = triton.next_power_of_2(k)
        _quantize_rows_kernel[(m,)](x, q, s, x.stride(0), q.stride(0), k, BLOCK=block,
                                    num_warps=4 if block <= 2048 else 8)
    return q, s


def quantize_rows_ref(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x32 = x.float()
    s = x32.abs().amax(dim=1, keepdim=True).clamp(min=_TINY) / FP8_MAX
    return (x32 / s).to(FP8), s


def quantize_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A projection's weight [N, K] → (e4m3 [N, K], fp32 scales [1, N]): one scale per output row."""
    q, s = quantize_rows_ref(w)
    return q, s.view(1, -1).contiguous()


def fp8_linear(x: torch.Tensor, w_q: torch.Tensor, w_scale: torch.Tensor,
               out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """x [M, K] @ W.T for W given as quantize_weight's (w_q [N, K], w_scale [1, N]) → [M, N] in out_dtype."""
    x_q, x_scale = quantize_rows(x)
    out: torch.Tensor = torch._scaled_mm(x_q, w_q.t(), scale_a=x_scale, scale_b=w_scale, out_dtype=out_dtype)
    return out


def fp8_linear_ref(x: torch.Tensor, w_q: torch.Tensor, w_scale: torch.Tensor,
                   out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """fp8_linear's arithmetic in plain torch on any device: the same quantised operands, an fp32 product."""
    x_q, x_scale = quantize_rows_ref(x)
    return ((x_q.float() * x_scale) @ (w_q.float() * w_scale.view(-1, 1)).t()).to(out_dtype)
