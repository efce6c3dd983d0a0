"""RMSNorm and fused residual-add + RMSNorm over packed token rows ([num_tokens, hidden]).

Rounding follows the Qwen3 eager layers: the residual sum is rounded to the residual's dtype before it is
normalised, the normalised value is rounded to the output dtype before the weight multiply. The residual may be
fp32 (our model's backbone) or bf16 (transformers' Qwen3 layers, which add in the activation dtype; 8 instead of
12 bytes per element moved).
"""
# @triton.jit kernels are untyped by nature:
# mypy: disable-error-code="untyped-decorator,no-untyped-def"

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr,
                     stride_x, stride_res, stride_out, stride_res_out,
                     hidden, eps,
                     HAS_RES: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_RES:
        r = tl.load(res_ptr + row * stride_res + cols, mask=mask, other=0.0).to(tl.float32)
        s = (x + r).to(res_out_ptr.dtype.element_ty)
        tl.store(res_out_ptr + row * stride_res_out + cols, s, mask=mask)
        x = s.to(tl.float32)
    var = tl.sum(x * x, axis=0) / hidden
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = (x * rstd).to(out_ptr.dtype.element_ty).to(tl.float32) * w
    tl.store(out_ptr + row * stride_out + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def _launch(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float,
            out: torch.Tensor | None, residual_out: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    assert x.dim() == 2 and x.stride(1) == 1, "x must be [num_tokens, hidden] with unit column stride"
    num_tokens, hidden = x.shape
    out = torch.empty_like(x) if out is None else out
    if residual is not None:
        assert residual.shape == x.shape and residual.stride(1) == 1
        residual_out = residual if residual_out is None else residual_out
    block = triton.next_power_of_2(hidden)
    if num_tokens:
        _rms_norm_kernel[(num_tokens,)](
            x, residual if residual is not None else x, weight, out,
            residual_out if residual_out is not None else out,
            x.stride(0), residual.stride(0) if residual is not None else 0, out.stride(0),
            residual_out.stride(0) if residual_out is not None else 0,
            hidden, eps, HAS_RES=residual is not None, BLOCK=block, num_warps=4 if block <= 2048 else 8)
    return out, residual_out


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """y = x / rms(x) * weight, per row of x [num_tokens, hidden]."""
    return _launch(x, None, weight, eps, out, None)[0]


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                 out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """residual += x (in place, rounded to its dtype); returns (rms_norm(residual) * weight, residual)."""
    normed, res = _launch(x, residual, weight, eps, out, residual)
    assert res is not None
    return normed, res


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * y.to(x.dtype)


def add_rms_norm_ref(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    s = residual + x
    return rms_norm_ref(s, weight, eps), s
