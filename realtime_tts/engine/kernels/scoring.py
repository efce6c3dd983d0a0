"""The heavy half of a diffusion step's scoring in one pass per position: classifier-free-guidance combine of
the cond/uncond log-softmaxes, a second log-softmax, MASK excluded, argmax token and its confidence.

Reads the audio head's logits in their own dtype (fp32, or bf16 as the reference's head gives them) and computes
in fp32, as the reference does after `.logits.to(torch.float32)`, so the [B, 8, T, 1025] fp32 intermediates of
the plain version never touch memory. Argmax ties resolve to the lowest id, as torch's do.
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


def cfg_argmax(c_logits: torch.Tensor, u_logits: torch.Tensor, guidance: torch.Tensor,
               mask_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """c_logits, u_logits [B, R, V] (R positions per item, e.g. T·8), guidance [B] fp32
    → (pred [B, R] int64, conf [B, R] fp32)."""
    num_b, per_item, vocab = c_logits.shape
    assert u_logits.shape == c_logits.shape and c_logits.stride(2) == 1 and u_logits.stride(2) == 1
    c2 = c_logits.reshape(num_b * per_item, vocab)
    u2 = u_logits.reshape(num_b * per_item, vocab)
    pred = torch.empty(num_b, per_item, dtype=torch.long, device=c_logits.device)
    conf = torch.empty(num_b, per_item, dtype=torch.float32, device=c_logits.device)
    if pred.numel():
        _cfg_argmax_kernel[(num_b * per_item,)](
            c2, u2, guidance, pred, conf, c2.stride(0), u2.stride(0), per_item, vocab, mask_id,
            BLOCK=triton.next_power_of_2(vocab), num_warps=4)
    return pred, conf


def cfg_argmax_ref(c_logits: torch.Tensor, u_logits: torch.Tensor, guidance: torch.Tensor,
                   mask_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """decoding.score's op sequence: logits [B, ..., V] → (argmax [B, ...], max log-prob [B, ...])."""
    c = torch.log_softmax(c_logits.float(), dim=-1)
    u = torch.log_softmax(u_logits.float(), dim=-1)
    g = guidance.view(-1, *[1] * (c.dim() - 1))  # [B, 1, ..., 1]: any number of position dims
    lp = torch.where(g != 0, torch.log_softmax(c + g * (c - u), dim=-1), c)
    lp[..., mask_id] = float("-inf")
    return lp.argmax(dim=-1), lp.max(dim=-1).values
