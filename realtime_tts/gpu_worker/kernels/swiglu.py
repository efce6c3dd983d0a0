"""SwiGLU activation: silu(gate) * up over packed token rows, reading gate/up as (possibly strided) views.

Pass the two halves of one fused gate_up projection output, or two separate projection outputs.
"""
# @triton.jit kernels are untyped by nature:
# mypy: disable-error-code="untyped-decorator,no-untyped-def"

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _silu_mul_kernel(g_ptr, u_ptr, out_ptr, stride_g, stride_u, stride_out, width, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < width
    g = tl.load(g_ptr + row * stride_g + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + row * stride_u + cols, mask=mask, other=0.0).to(tl.float32)
    # silu is rounded to the activation dtype before the product, as the eager layer does
    act = (g / (1.0 + tl.exp(-g))).to(out_ptr.dtype.element_ty).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, (act * u).to(out_ptr.dtype.element_ty), mask=mask)


def silu_mul(gate: torch.Tensor, up: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """gate, up: [num_tokens, intermediate] with unit column stride (views of one gate_up buffer are fine)."""
    assert gate.shape == up.shape and gate.dim() == 2 and gate.stride(1) == 1 and up.stride(1) == 1
    num_tokens, width = gate.shape
    out = torch.empty(num_tokens, width, dtype=gate.dtype, device=gate.device) if out is None else out
    block = 1024
    if num_tokens:
        _silu_mul_kernel[(num_tokens, triton.cdiv(width, block))](
            gate, up, out, gate.stride(0), up.stride(0), out.stride(0), width, BLOCK=block, num_warps=4)
    return out


def silu_mul_ref(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(gate) * up
