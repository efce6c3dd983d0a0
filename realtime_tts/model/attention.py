"""Attention over packed variable-length rows: the swappable function the backbone calls.

Signature (flash-attention varlen convention): q [N, Hq, D], k/v [N, Hkv, D], cu_seqlens [R+1] int32 row
offsets, max_seqlen, scale → [N, Hq, D]. Every row attends to itself only, bidirectionally. Torch only.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch
import torch.nn.functional as F

AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int, float], torch.Tensor]


def sdpa_per_row(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                 max_seqlen: int, scale: float) -> torch.Tensor:
    """One SDPA call per row (no mask, no padding): exact work, CPU-friendly; a loop over rows."""
    out = torch.empty_like(q)  # [N, Hq, D]
    bounds = cu_seqlens.tolist()
    gqa = q.shape[1] != k.shape[1]
    for start, end in itertools.pairwise(bounds):
        qi = q[start:end].transpose(0, 1)  # [Hq, L, D]
        ki = k[start:end].transpose(0, 1)  # [Hkv, L, D]
        vi = v[start:end].transpose(0, 1)
        oi = F.scaled_dot_product_attention(qi, ki, vi, scale=scale, enable_gqa=gqa)
        out[start:end] = oi.transpose(0, 1)
    return out


def sdpa_block_diagonal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                        max_seqlen: int, scale: float) -> torch.Tensor:
    """One SDPA call over all N tokens with a block-diagonal bool mask: no host sync, graph-capturable,
    O(N²) mask memory — the GPU fallback until a varlen kernel replaces it."""
    n = q.shape[0]
    row_of = torch.searchsorted(cu_seqlens[1:], torch.arange(n, device=q.device), right=True)  # [N]
    mask = row_of[:, None] == row_of[None, :]  # [N, N]
    out = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                         v.transpose(0, 1)[None], attn_mask=mask, scale=scale,
                                         enable_gqa=q.shape[1] != k.shape[1])  # [1, Hq, N, D]
    return out[0].transpose(0, 1)


def default_attention(device: torch.device) -> AttentionFn:
    return sdpa_block_diagonal if device.type == "cuda" else sdpa_per_row
