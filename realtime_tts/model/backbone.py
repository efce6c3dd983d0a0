"""Our bidirectional Qwen3 transformer over PACKED rows: [total_tokens, hidden] + cu_seqlens, positions
restarting at 0 in every row. Parameter names match the released checkpoint (llm.*). Torch only.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from realtime_tts.model.attention import AttentionFn, sdpa_per_row


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32, multiply the gain in the weights' dtype (Qwen3's numerics; the input may be
        # the fp32 residual stream, the output feeds the compute-dtype matmuls).
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(self.weight.dtype)

    def forward_fp32(self, x: torch.Tensor) -> torch.Tensor:
        """Same, but the result stays fp32 (the final norm feeding an fp32 audio head)."""
        x32 = x.float()
        return self.weight.float() * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps))


class Attention(nn.Module):
    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        hidden, self.head_dim = cfg["hidden_size"], cfg["head_dim"]
        self.num_heads, self.num_kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=False)
        self.q_norm = RMSNorm(self.head_dim, cfg["rms_norm_eps"])
        self.k_norm = RMSNorm(self.head_dim, cfg["rms_norm_eps"])
        self.scale = self.head_dim ** -0.5

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cu_seqlens: torch.Tensor,
                max_seqlen: int, attn: AttentionFn) -> torch.Tensor:
        n = x.shape[0]
        q = self.q_norm(self.q_proj(x).view(n, self.num_heads, self.head_dim))  # [N, Hq, D]
        k = self.k_norm(self.k_proj(x).view(n, self.num_kv_heads, self.head_dim))  # [N, Hkv, D]
        v = self.v_proj(x).view(n, self.num_kv_heads, self.head_dim)  # [N, Hkv, D]
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        out = attn(q, k, v, cu_seqlens, max_seqlen, self.scale)  # [N, Hq, D]
        projected: torch.Tensor = self.o_proj(out.reshape(n, self.num_heads * self.head_dim))
        return projected


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # Rotated in fp32 (cos/sin are fp32 tables) and rounded once to the compute dtype.
    x32 = x.float()
    half = x.shape[-1] // 2
    rotated = torch.cat((-x32[..., half:], x32[..., :half]), dim=-1)
    return (x32 * cos[:, None, :] + rotated * sin[:, None, :]).to(x.dtype)


class MLP(nn.Module):
    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        hidden, inter = cfg["hidden_size"], cfg["intermediate_size"]
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return out


class Layer(nn.Module):
    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cu_seqlens: torch.Tensor,
                max_seqlen: int, attn: AttentionFn) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cu_seqlens, max_seqlen, attn)
        out: torch.Tensor = x + self.mlp(self.post_attention_layernorm(x))
        return out


class Backbone(nn.Module):
    """Qwen3 decoder stack without causal masking and without a LM head."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg["num_hidden_layers"]))
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        theta = float((cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta", 10000.0)))
        dim = cfg["head_dim"]
        inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))  # [D/2]
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._rope_cache: tuple[torch.Tensor, torch.Tensor] | None = None

    def rope_tables(self, max_positions: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin for positions 0..max_positions-1 ([P, D], activation dtype), grown on demand. Computed
        in fp32 as position × inv_freq, then cast — the same values a per-call computation gives."""
        cache = self._rope_cache
        if cache is None or cache[0].shape[0] < max_positions or cache[0].dtype != dtype \
                or cache[0].device != self.inv_freq.device:
            size = max(max_positions, 4096)
            inv_freq: torch.Tensor = self.inv_freq  # type: ignore[assignment]
            pos = torch.arange(size, device=inv_freq.device).float()
            freqs = pos[:, None] * inv_freq.float()[None, :]  # [P, D/2]
            emb = torch.cat((freqs, freqs), dim=-1)  # [P, D]
            cache = (emb.cos().to(dtype), emb.sin().to(dtype))
            self._rope_cache = cache
        return cache

    def forward(self, embeds: torch.Tensor, positions: torch.Tensor, cu_seqlens: torch.Tensor,
                max_seqlen: int, attn: AttentionFn = sdpa_per_row) -> torch.Tensor:
        """embeds [N, H], positions [N] long (restart per row), cu_seqlens [R+1] int32 → hidden [N, H] fp32
        (the final norm's output is kept in fp32: the audio head reads it at full precision)."""
        cos_table, sin_table = self.rope_tables(max_seqlen, torch.float32)
        cos, sin = cos_table[positions], sin_table[positions]  # [N, D]
        # The residual stream stays fp32 whatever the weights' dtype: 28 bf16 roundings of the running sum
        # are the main drift of a bf16 forward from fp32; the matmuls still run in the weights' dtype.
        x = embeds.float()  # [N, H]
        for layer in self.layers:
            x = layer(x, cos, sin, cu_seqlens, max_seqlen, attn)
        return self.norm.forward_fp32(x)
