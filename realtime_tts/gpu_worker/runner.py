"""Executes diffusion steps fast: items in device slots (gpu_worker/slots.py), fused Triton backbone, a CUDA graph
per (tokens, batch, frames) bucket whose only input is the batch's slot list, eager fallback on a miss,
hit/miss counters. Semantics are realtime_tts.model.decoding's step; this module changes only how a step runs.
Worker processes only (torch).
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import torch

from realtime_tts.gpu_worker.host_copy import to_host
from realtime_tts.gpu_worker.slots import FRAME_QUANTUM, Layout, SlotTable
from realtime_tts.model import decoding
from realtime_tts.model.decoding import ItemState, PackedBatch
from realtime_tts.model.network import OmniVoiceModel

log = logging.getLogger("realtime_tts.runner")

# Default ladders. Tokens: a 6 s design item is ~330 tokens (cond ~180 + uncond 150), clone ~490.
# Up to 16384 (serving steps; the worker captures these at start-up) fine where latency-bound steps live
# (the deadline scheduler sizes steps on this staircase: bench/results/omnivoice_sched_sim.md, 512-token
# buckets gave N=100 agents 297 vs 314 ms p95 first audio), above (bulk batches, captured on first use) by
# 128: a B=128 design batch of 42368 tokens runs unpadded (by 512 it ran 43008, 1.5% more of every kernel).
SERVING_MAX_TOKENS = 16384
TOKEN_BUCKETS = ((256, 512, 768, 1024, 1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096, 4608, 5120, 5632, 6144,
                  7168, 8192, 9216, 10240, 12288, 14336, SERVING_MAX_TOKENS)
                 + tuple(range(SERVING_MAX_TOKENS + 128, 65536 + 1, 128)))
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128)
# Steps above the serving ladder (bulk, captured on first use) pad their target grids to a multiple of this many
# frames instead of slots.FRAME_QUANTUM: the audio head and the scoring run on every padded frame (6 s items, 150
# frames: head + scoring of a B=128 design step 1.57 ms at 192, 1.33 at 152; H200 profiles run6 and run7).
BULK_FRAME_QUANTUM = 8
PRECISIONS = ("fp32", "reference")  # StepRunner(precision=...)
# StepRunner(codec_channels_last=...): the fused codec decoder's memory layout. Channels-last: cuDNN's NHWC convs
# without layout conversions, 105-108 ms per 128 six-second grids vs 123-126 channels-first on the H200
# (bulk run 18 in bench/results/HISTORY.md; waveforms within 1.4e-5 of the stock decoder's, TF32 sums).
CODEC_CHANNELS_LAST = True
# StepRunner(codec_units=...): with the channels-last decoder, each residual unit of <= 64 channels (the last two
# stages, 48000 and 144000 samples per 6 s) as one Triton kernel (kernels/dac_units.py) instead of cuDNN convs and
# two epilogue passes: 96.3 ms per 128 six-second grids vs 100.9-105.9 on the H200 (bulk run 19,
# bench/results/HISTORY.md).
CODEC_UNITS = True


def _ceil_to(ladder: tuple[int, ...], n: int) -> int | None:
    i = bisect.bisect_left(ladder, n)
    return ladder[i] if i < len(ladder) else None


class FusedBackbone:
    """The model's Backbone forward with fused weights (qkv, gate_up) and Triton kernels for norms, q/k-norm +
    RoPE, SwiGLU and varlen attention. Same function as model.llm (to bf16 rounding); holds its own copies of
    the fused weight matrices (~0.6 GB at full size in bf16).

    residual_dtype: the dtype of the residual stream, the embedding and the final norm's output. fp32 (default)
    is the model's own backbone (model.llm); the weights' dtype (bf16) is how the reference implementation
    computes (transformers' Qwen3 layers add the residual in the activation dtype) and halves the residual
    traffic of every add+norm."""

    # attention: how every forward applies q/k norm + RoPE and attends, one of kernels.ATTENTION_MODES ("q_fused":
    # k-only norm + RoPE, q normalised as the attention kernel loads its tile; "split": qk_norm_rope then
    # attention; "fused": both inside the attention kernel), with block = (per-head block_m, block_n, num_warps,
    # num_stages) and heads q heads per program (None: the whole GQA group, sharing each K/V tile). The defaults
    # are the H200's fastest at every size the bench's kernel stage measured (bulk run 6b
    # in bench/results/HISTORY.md, its .jsonl): 0.037 ms at one item (fused: 0.042, split: 0.035 with a second launch),
    # 0.19 / 0.31 ms at 64 design / clone items (fused: 0.38 / 0.67, split 64×32: 0.24 / 0.38). Until then
    # forwards of up to 2048 tokens took "fused" and larger ones "split": one mode now serves both.
    def __init__(self, model: OmniVoiceModel, residual_dtype: torch.dtype = torch.float32,
                 attention: str = "q_fused", block: tuple[int, int, int, int] = (32, 32, 4, 3),
                 heads: int | None = None, swiglu_gemm_min_tokens: int = 0, fp8: bool = False) -> None:
        from realtime_tts.gpu_worker import kernels

        self.k = kernels
        llm = model.llm
        cfg = llm.cfg
        self.eps = float(cfg["rms_norm_eps"])
        self.num_heads, self.num_kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.head_dim = cfg["head_dim"]
        self.inter = cfg["intermediate_size"]
        if attention not in kernels.ATTENTION_MODES:
            raise ValueError(f"attention must be one of {kernels.ATTENTION_MODES}, not {attention!r}")
        self.attention, self.block, self.heads = attention, block, heads
        # Forwards of at least swiglu_gemm_min_tokens tokens run the MLP's gate/up GEMM with SwiGLU in its
        # epilogue (kernels/gemm.py; the [N, 2I] product never reaches memory); smaller ones, and all when 0,
        # cuBLAS + silu_mul. (The o/down projections with the residual add in a Triton GEMM's epilogue measured
        # slower than cuBLAS + add_rms_norm at every tile tried; so did the q/k/v projection with the
        # k heads' norm + RoPE in its epilogue: both in bench/results/omnivoice_gemm_h200.md.)
        self.swiglu_gemm_min_tokens = swiglu_gemm_min_tokens
        self.llm = llm
        self.layers: list[dict[str, torch.Tensor]] = []
        for layer in llm.layers:
            layer_: Any = layer  # nn.ModuleList items are typed as Module
            a, m = layer_.self_attn, layer_.mlp
            self.layers.append({
                "ln1": layer_.input_layernorm.weight, "ln2": layer_.post_attention_layernorm.weight,
                "qkv": torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight], 0).contiguous(),
                "o": a.o_proj.weight, "qn": a.q_norm.weight, "kn": a.k_norm.weight,
                "gate_up": torch.cat([m.gate_proj.weight, m.up_proj.weight], 0).contiguous(),
                "down": m.down_proj.weight,
            })
        # fp8: the four projections of every layer in FP8 (kernels/fp8.py: e4m3 weights with a scale per output
        # row, activations quantised per token); the SwiGLU GEMM is then not used.
        self.fp8 = fp8
        if fp8:
            for w in self.layers:
                for name in ("qkv", "o", "gate_up", "down"):
                    w[name + "_fp8"], w[name + "_fp8_scale"] = kernels.quantize_weight(w[name])
            swiglu_gemm_min_tokens = self.swiglu_gemm_min_tokens = 0
        if swiglu_gemm_min_tokens > 0:  # swiglu_gemm's weight layout, beside the plain one cuBLAS reads
            for w in self.layers:
                w["gate_up_tiles"] = kernels.interleave_gate_up(w["gate_up"], kernels.SWIGLU_CONFIG.block_n)
        self.final_norm = llm.norm.weight
        self.text_table, self.audio_table = llm.embed_tokens.weight, model.audio_embeddings.weight
        self.audio_vocab = model.audio_vocab
        self.residual_dtype = residual_dtype

    def embed(self, ids: torch.Tensor, audio_mask: torch.Tensor) -> torch.Tensor:
        """model.embed in one kernel → [N, H] in the residual dtype (a fresh buffer: __call__ may update it in
        place)."""
        return self.k.embed(ids, audio_mask, self.text_table, self.audio_table, self.audio_vocab,
                            out_dtype=self.residual_dtype)

    def __call__(self, embeds: torch.Tensor, positions: torch.Tensor, cu_seqlens: torch.Tensor,
                 max_seqlen: int, consume: bool = False) -> torch.Tensor:
        """embeds [N, H] → hidden [N, H] after the final norm, in the residual dtype. The residual stream is
        kept in residual_dtype (embeds are cast to it), the matmuls run in the weights' dtype, rope angles are fp32.
        Tokens past cu_seqlens[-1] are padding: computed row-locally, never attended to, so they cannot
        disturb real rows."""
        k = self.k
        n = embeds.shape[0]
        hq, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        mm_dtype = self.final_norm.dtype
        cos_table, sin_table = self.llm.rope_tables(max_seqlen, torch.float32)
        mode, heads, (bm, bn, nw, ns) = self.attention, self.heads, self.block
        # split: the per-token angles [N, D] fp32, gathered once for all layers
        angles = (cos_table[positions], sin_table[positions]) if mode == "split" else None
        tiles = k.attention_tiles(cu_seqlens, k.max_attention_tiles(n, cu_seqlens.numel() - 1, bm), bm)
        # Zeroed once: padding tokens are in no row, so attention never writes them; keep them finite.
        attn = torch.zeros(n, hq, d, dtype=mm_dtype, device=embeds.device)  # [N, Hq, D]
        # [N, H], updated in place by the fused add+norm (consume: the caller hands embeds over)
        if embeds.dtype != self.residual_dtype:
            residual = embeds.to(self.residual_dtype)
        else:
            residual = embeds if consume else embeds.clone()
        fused_mlp = 0 < self.swiglu_gemm_min_tokens <= n
        x: torch.Tensor = k.rms_norm(residual, self.layers[0]["ln1"], self.eps,
                                     out=torch.empty(n, residual.shape[1], dtype=mm_dtype, device=embeds.device))
        mm = self._fp8_mm if self.fp8 else self._mm
        for i, w in enumerate(self.layers):
            qkv = mm(x, w, "qkv").view(n, hq + 2 * hkv, d)  # [N, Hq+2Hkv, D]
            q, kk, v = qkv[:, :hq], qkv[:, hq:hq + hkv], qkv[:, hq + hkv:]
            k.norm_rope_attention(q, kk, v, cu_seqlens, max_seqlen, tiles, w["qn"], w["kn"], positions, cos_table,
                                  sin_table, self.eps, out=attn, mode=mode, heads_per_program=heads, block_m=bm,
                                  block_n=bn, num_warps=nw, num_stages=ns, angles=angles)
            o = mm(attn.view(n, hq * d), w, "o")  # [N, H]
            x, residual = k.add_rms_norm(o, residual, w["ln2"], self.eps)
            if fused_mlp:
                act = k.swiglu_gemm(x, w["gate_up_tiles"], self.inter)  # [N, I]
            else:
                gate_up = mm(x, w, "gate_up")  # [N, 2I]
                act = k.silu_mul(gate_up[:, :self.inter], gate_up[:, self.inter:])
            mlp = mm(act, w, "down")
            if i + 1 < len(self.layers):
                x, residual = k.add_rms_norm(mlp, residual, self.layers[i + 1]["ln1"], self.eps)
            else:  # the final norm's output is in the residual dtype (the head reads it at that precision)
                x, residual = k.add_rms_norm(mlp, residual, self.final_norm, self.eps,
                                             out=torch.empty_like(residual))
        return x

    @staticmethod
    def _mm(x: torch.Tensor, w: dict[str, torch.Tensor], name: str) -> torch.Tensor:
        return torch.matmul(x, w[name].t())

    def _fp8_mm(self, x: torch.Tensor, w: dict[str, torch.Tensor], name: str) -> torch.Tensor:
        return self.k.fp8_linear(x, w[name + "_fp8"], w[name + "_fp8_scale"], out_dtype=x.dtype)


@dataclass(frozen=True, slots=True)
class BucketKey:
    num_tokens: int
    batch: int
    frames: int


@dataclass
class RunnerStats:
    graph_hits: int = 0
    graph_misses: int = 0  # steps run eagerly because no graph fitted (or graphs are off)
    graphs_captured: int = 0
    capture_s: float = 0.0
    steps: int = 0
    step_s: float = 0.0  # host wall time inside step() (the GPU runs behind it, at most max_inflight steps)
    wait_s: float = 0.0  # the part of step_s spent waiting for the GPU to catch up
    # CUDA: device time of the steps (from the launch of a step's graph to its end) and the device's idle
    # gaps between them (from the end of one step to the launch of the next while the loop stays busy;
    # an eager bucket's layout rebuild counts as idle), read off timing events once the steps are done (no sync)
    gpu_busy_s: float = 0.0
    gpu_gap_s: float = 0.0
    gpu_steps: int = 0  # steps whose busy time is counted
    miss_reasons: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"graph_hits": self.graph_hits, "graph_misses": self.graph_misses,
                "graphs_captured": self.graphs_captured, "capture_s": round(self.capture_s, 3),
                "steps": self.steps, "step_s": round(self.step_s, 3), "wait_s": round(self.wait_s, 3),
                "gpu_busy_s": round(self.gpu_busy_s, 3), "gpu_gap_s": round(self.gpu_gap_s, 3),
                "gpu_steps": self.gpu_steps,
                "miss_reasons": dict(self.miss_reasons)}


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph | None  # the step; None: a bucket run eagerly (StepRunner.bucketed)
    layout: Layout  # the static buffers: the slot of each batch row (the empty slot pads) and their layout
    # Captured buckets: the layout's own graph, replayed by _load when the items change (one launch instead of
    # ~40 eager ones: ~25 small ops and 16 buffer copies; under serving churn the batch changes nearly every
    # step, and H200 stack samples of the loop thread at c9a13cc put 40-55% of its time in those launches at
    # 32-128 items). A separate graph, not part of the step's: an unchanged batch (bulk runs, the warm-up's
    # single items) does not pay the layout's device time on every step. None: eager (bucketed) layout.
    layout_graph: torch.cuda.CUDAGraph | None = None
    loaded: tuple[int, ...] = ()  # the slot assignments (SlotTable.serial) the layout was last built for


class StepRunner:
    """Runs decoding steps for ItemStates (the role of realtime_tts.model.decoding.step), keeping each item in
    flight in a device slot (gpu_worker/slots.py): a step's host work is one graph replay (or an eager step), plus,
    when its items changed, a [B] slot-id copy and the replay of the bucket's layout graph; no host sync, and the
    host runs at most max_inflight steps ahead of the GPU.

    use_fused: Triton backbone + one-pass embedding (CUDA; or anywhere under TRITON_INTERPRET).
    fused_scoring: the CFG/argmax kernel and a TF32 audio head (head_tf32) instead of decoding.score's
    fp32 tensors (not with class-temperature sampling). use_graphs: CUDA graphs per (tokens, batch, frames)
    bucket, captured on the first step that needs one (or ahead with capture()) while the card keeps
    min_free_bytes free and fewer than max_graphs exist; anything else runs eagerly and counts as a miss
    (stats.miss_reasons says why). codec_graph_frames > 0 (CUDA): decode() replays per-length CUDA graphs of
    the codec for segments up to that many frames, in padded masked batches across lengths
    (gpu_worker/codec_graphs.py).

    precision: "fp32" (default) keeps the fused backbone's residual stream, embedding and final norm in fp32 and
    runs the audio head in fp32 (TF32 when head_tf32) → fp32 logits. "reference" computes as the reference
    `omnivoice` package does with a model loaded in bf16: residual stream, embedding sum, final norm output,
    head GEMM and logits in the weights' dtype (scoring still in fp32). With use_fused=False the backbone is the
    model's own (fp32 residual) and only the head follows precision. The server's default is "reference"
    (config --precision); this class keeps "fp32", the model layer's own arithmetic, for its direct users.

    attention, attention_block, attention_heads: FusedBackbone's attention mode, tiles and q heads per program.
    swiglu_gemm_min_tokens: steps of at least this many tokens run the MLP's gate/up GEMM + SwiGLU as one Triton
    kernel (0: never; FusedBackbone). fp8_matmuls (CUDA, sm89+): the backbone's four projections per layer in FP8
    (kernels/fp8.py; FusedBackbone(fp8=True)), the SwiGLU GEMM then unused.
    fused_snake (CUDA): the codec's Snake activations through kernels/snake.py; with fused_codec, the decoder's
    conv bias and residual adds inside those passes (kernels/dac_decoder.py), with codec_channels_last every
    activation in channels-last memory (cuDNN's NHWC convs without layout conversions) and with codec_units the
    narrow residual units as one kernel each (kernels/dac_units.py). capture_lock: held around every step-graph
    capture (the worker's lock, shared with its decode thread).
    """

    def __init__(self, model: OmniVoiceModel, *, use_fused: bool | None = None, use_graphs: bool | None = None,
                 fused_scoring: bool | None = None, head_tf32: bool = True,
                 max_graphs: int = 64, min_free_bytes: int = 4 << 30, capture_on_miss: bool = True,
                 token_buckets: tuple[int, ...] = TOKEN_BUCKETS, batch_buckets: tuple[int, ...] = BATCH_BUCKETS,
                 max_slots: int = 1024, max_inflight: int = 2, bucketed: bool = False,
                 codec_graph_frames: int = 0, precision: str = "fp32", attention: str = "q_fused",
                 attention_block: tuple[int, int, int, int] = (32, 32, 4, 3), attention_heads: int | None = None,
                 swiglu_gemm_min_tokens: int = 0, fp8_matmuls: bool = False, fused_snake: bool = True,
                 fused_codec: bool = True,
                 codec_channels_last: bool = CODEC_CHANNELS_LAST, codec_units: bool = CODEC_UNITS,
                 capture_lock: threading.Lock | None = None) -> None:
        cuda = model.device.type == "cuda"
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
        self.precision = precision
        stream_dtype = model.dtype if precision == "reference" else torch.float32  # residual stream and head
        self.head_dtype = stream_dtype
        self.model = model
        self.use_fused = cuda if use_fused is None else use_fused
        self.use_graphs = cuda if use_graphs is None else use_graphs
        if self.use_graphs and not cuda:
            raise ValueError("CUDA graphs need a CUDA model")
        if fp8_matmuls and not (self.use_fused and cuda and torch.cuda.get_device_capability(model.device) >= (8, 9)):
            raise ValueError("fp8_matmuls needs the fused backbone on a CUDA device with FP8 tensor cores (sm89+)")
        if model.llm.cfg["head_dim"] < 32:  # the rope dots on tensor cores need half a head ≥ 16 (tiny models)
            attention = "split"
        self.fused = FusedBackbone(model, residual_dtype=stream_dtype, attention=attention, block=attention_block,
                                   heads=attention_heads, swiglu_gemm_min_tokens=swiglu_gemm_min_tokens,
                                   fp8=fp8_matmuls) if self.use_fused else None
        self.fused_scoring = self.use_fused if fused_scoring is None else fused_scoring
        # "reference" on an fp32 model: the reference's head is then a plain fp32 GEMM, not TF32
        self.head_tf32 = head_tf32 and precision == "fp32"
        self._head_weight: torch.Tensor | None = None
        self.max_graphs = max_graphs
        self.min_free_bytes = min_free_bytes
        self.capture_on_miss = capture_on_miss
        self.token_buckets = token_buckets
        self.batch_buckets = batch_buckets
        self.max_inflight = max_inflight
        self.table = SlotTable(max_slots, model.num_codebooks, model.mask_id, model.device)
        self.graphs: dict[BucketKey, _Graph] = {}
        self.stats = RunnerStats()
        self._pool: Any = torch.cuda.graph_pool_handle() if self.use_graphs else None
        # (launch event, end event, whether the gap before it counts) of each step queued on the GPU; _last_end:
        # the end of the step before the oldest; _idle: the caller had nothing to run since the last step (the
        # time until the next one is no gap between steps)
        self._inflight: deque[tuple[torch.cuda.Event, torch.cuda.Event, bool]] = deque()
        self._last_end: torch.cuda.Event | None = None
        self._idle = True
        # Held around every step-graph capture: torch captures in global mode, so another thread's CUDA work (the
        # worker's decode thread) must not run meanwhile; that thread takes the same lock.
        self._capture_lock: contextlib.AbstractContextManager[Any] = capture_lock or contextlib.nullcontext()
        self.codec_graphs: Any = None
        if fused_snake and self.use_fused and cuda and model.codec is not None:
            # one Triton pass per Snake activation of the codec (kernels/snake.py); on CUDA only: under the CPU
            # interpreter a tiny decode would take seconds
            from realtime_tts.gpu_worker.kernels import use_fused_codec, use_fused_snake

            use_fused_snake(model.codec.model)
            if fused_codec:  # the decoder's conv bias / residual adds folded into those Snake passes
                use_fused_codec(model.codec.model, channels_last=codec_channels_last,
                                fused_units=codec_units and codec_channels_last)
        if codec_graph_frames > 0 and cuda:
            from realtime_tts.gpu_worker.codec_graphs import CodecGraphs

            self.codec_graphs = CodecGraphs(model.codec, codec_graph_frames)
        # Without graphs: run each step eagerly in its graph bucket's padded shapes through the graph path's
        # cached layouts (_load), so the CPU tests exercise that bookkeeping too.
        self.bucketed = bucketed
        self._buckets: dict[BucketKey, _Graph] = {}
        if self.use_graphs:
            # Graphs hold the rope tables' addresses: grow them once, now, to the largest bucket.
            model.llm.rope_tables(max(token_buckets), torch.float32)

    # ------------------------------------------------------------------------------------------ the step
    @torch.inference_mode()
    def forward_step(self, batch: PackedBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """One step on a packed batch → (new tokens [B, 8, Tmax], new step [B]); batch is not modified.
        The same work as decoding.step_packed, with the fused backbone when enabled."""
        model = self.model
        if self.fused is not None:
            embeds = self.fused.embed(batch.ids, batch.audio_mask)  # [N, H] in the residual dtype
            hidden = self.fused(embeds, batch.positions, batch.cu_seqlens, batch.max_seqlen, consume=True)
        else:
            embeds = model.embed(batch.ids, batch.audio_mask)
            hidden = model.llm(embeds, batch.positions, batch.cu_seqlens, batch.max_seqlen, model.attention)
        cls_noise, pos_noise = decoding.item_noise(batch, model.audio_vocab)
        if self.fused_scoring and cls_noise is None:
            from realtime_tts.gpu_worker.kernels import cfg_argmax

            num_b, t_max = batch.cond_index.shape
            vocab, num_cb = model.audio_vocab, model.num_codebooks
            c = self._head(hidden[batch.cond_index]).view(num_b, t_max * num_cb, vocab)  # [B, Tmax·8, V]
            u = self._head(hidden[batch.uncond_index]).view(num_b, t_max * num_cb, vocab)
            pred, conf = cfg_argmax(c, u, batch.guidance, model.mask_id)
            tokens = decoding.unmask(pred.view(num_b, t_max, num_cb).transpose(1, 2),
                            conf.view(num_b, t_max, num_cb).transpose(1, 2), batch, model.mask_id, pos_noise)
        else:
            head = model.head if self.head_dtype == torch.float32 else self._head_fp32_logits
            c_logits = head(hidden[batch.cond_index]).permute(0, 2, 1, 3)  # [B, 8, Tmax, V]
            u_logits = head(hidden[batch.uncond_index]).permute(0, 2, 1, 3)
            tokens = decoding.score(c_logits, u_logits, batch, model.mask_id, cls_noise, pos_noise)
        new_step = batch.step + (batch.step < batch.reveal.shape[1] - 1).long()
        return tokens, new_step

    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Audio head logits [..., 8·V] in head_dtype. fp32: the model's head is a plain fp32 GEMM (~10× slower
        than bf16 on the card); here it runs with TF32 tensor cores when head_tf32 — 10-bit mantissa operands,
        still 8× finer than the bf16 logits of the reference implementation. bf16 (precision="reference"): the
        reference's head, a bf16 GEMM on the bf16 final-norm output giving bf16 logits."""
        if self.head_dtype != torch.float32:
            low = self.model.audio_heads.weight.to(self.head_dtype)  # the weights themselves in a bf16 model
            return torch.nn.functional.linear(hidden.to(self.head_dtype), low)
        weight = self._head_weight
        if weight is None:
            weight = self._head_weight = self.model.audio_heads.weight.float()
        if not self.head_tf32 or hidden.device.type != "cuda":
            return torch.nn.functional.linear(hidden.float(), weight)
        prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            return torch.nn.functional.linear(hidden.float(), weight)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev

    def _head_fp32_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """model.head's shape and dtype ([..., 8, V] fp32, what decoding.score reads) from _head's logits: the
        reference casts its bf16 logits to fp32 before scoring."""
        logits = self._head(hidden).float()  # [..., 8·V]
        return logits.view(*hidden.shape[:-1], self.model.num_codebooks, self.model.audio_vocab)

    def _advance(self, layout: Layout, max_seqlen: int, class_sampling: bool = False) -> None:
        """One step for the items of a layout, packed on the device, results written back into their slots."""
        batch = self.table.pack(layout, max_seqlen, class_sampling)
        tokens, new_step = self.forward_step(batch)
        self.table.write_back(layout.slots, tokens, new_step)

    def check(self, item: Any) -> None:
        """Raise BadRequest when an item can never run here (longer than a slot)."""
        self.table.check(item)

    def _admit(self, states: list[ItemState]) -> None:
        for s in states:
            if s.slot is None:
                s.slot = self.table.assign(s.item, s.tokens, s.step)

    def release(self, state: ItemState) -> None:
        """Free a state's slot (a cancelled item); its grid is dropped."""
        if state.slot is not None:
            self.table.release(state.slot)
            state.slot = None

    def grid(self, state: ItemState) -> torch.Tensor:
        """A state's current grid [8, T]: a copy out of its slot while in flight, else state.tokens."""
        return self.table.tokens(state.slot, state.item.num_frames) if state.slot is not None else state.tokens

    def _finish(self, states: list[ItemState]) -> None:
        """States that just ran their last step: copy their grids out of the slots (enqueued behind the step)
        and free the slots; state.ready marks when the copies are done (CUDA)."""
        for s in states:
            assert s.slot is not None
            s.tokens = self.table.tokens(s.slot, s.item.num_frames)
            self.table.release(s.slot)
            s.slot = None
        if states and self.model.device.type == "cuda":
            event = torch.cuda.Event()  # type: ignore[no-untyped-call]
            event.record()
            for s in states:
                s.ready = event

    def _launch_mark(self) -> torch.cuda.Event | None:
        """A timing event just before a step's main launch (CUDA), for its busy time and the gap before it."""
        if self.model.device.type != "cuda":
            return None
        event = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        event.record()
        return event

    def _throttle(self, launched: torch.cuda.Event | None) -> None:
        """Record this step's end; wait while more than max_inflight steps are queued on the GPU, so the
        scheduler's next choice is never based on a stale view of far-ahead work. A step taken off the queue is
        done: its device time and the idle gap before it are read off its events then (no extra sync)."""
        if launched is None:
            return
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end.record()
        self._inflight.append((launched, end, not self._idle))
        self._idle = False
        if len(self._inflight) > self.max_inflight:
            t0 = time.perf_counter()
            start, done, gap_counts = self._inflight.popleft()
            done.synchronize()
            self.stats.wait_s += time.perf_counter() - t0
            self.stats.gpu_busy_s += start.elapsed_time(done) / 1000.0
            self.stats.gpu_steps += 1
            if gap_counts and self._last_end is not None:
                self.stats.gpu_gap_s += max(0.0, self._last_end.elapsed_time(start) / 1000.0)
            self._last_end = done

    def idle(self) -> None:
        """The caller has nothing to run now: the time until its next step is not a gap between steps."""
        self._idle = True

    def bucket_key(self, states: list[ItemState]) -> BucketKey | str:
        """The bucket a batch of states pads to, or the reason there is none."""
        num_tokens = _ceil_to(self.token_buckets, sum(s.item.num_tokens for s in states))
        num_b = _ceil_to(self.batch_buckets, len(states))
        if num_tokens is None:
            return "tokens"
        if num_b is None:
            return "batch"
        if any(s.item.params.class_temperature > 0 for s in states):
            return "class_sampling"  # the graphs are captured for argmax tokens
        quantum = BULK_FRAME_QUANTUM if num_tokens > SERVING_MAX_TOKENS else FRAME_QUANTUM
        frames = -(-max(s.item.num_frames for s in states) // quantum) * quantum
        return BucketKey(num_tokens, num_b, min(frames, self.table.max_frames))

    def _slot_ids(self, states: list[ItemState], width: int) -> torch.Tensor:
        """The slots of states padded with the empty slot to `width`: a host tensor, staged in pinned memory on
        CUDA so that copying it to the device (on this stream) does not wait for the GPU."""
        ids = [s.slot if s.slot is not None else self.table.empty for s in states]
        ids += [self.table.empty] * (width - len(states))
        return self.table.stage(torch.tensor(ids, dtype=torch.long))

    @torch.inference_mode()
    def step(self, states: list[ItemState]) -> None:
        """One diffusion step for every live state (each at its own step index), in place. Finished states get
        their final grid in state.tokens (a device tensor; state.ready is its event on CUDA)."""
        live = [s for s in states if not s.done]
        if not live:
            return
        t0 = time.perf_counter()
        self._admit(live)
        key = self.bucket_key(live)
        graph = self._graph_for(key) if self.use_graphs else None
        if graph is not None:
            assert isinstance(key, BucketKey) and graph.graph is not None
            self._load(graph, live, key)
            launched = self._launch_mark()
            graph.graph.replay()
            self.stats.graph_hits += 1
        elif self.bucketed and isinstance(key, BucketKey):
            entry = self._buckets.get(key)
            if entry is None:
                entry = self._buckets[key] = _Graph(graph=None, layout=self._empty_layout(key))
            self._load(entry, live, key)
            launched = self._launch_mark()
            self._advance(entry.layout, key.num_tokens)
            self.stats.graph_misses += 1
        else:
            launched = self._launch_mark()
            self._run_eager(live)
            self.stats.graph_misses += 1
        for s in live:
            s.step += 1
        self._finish([s for s in live if s.done])
        self._throttle(launched)
        self.stats.steps += 1
        self.stats.step_s += time.perf_counter() - t0

    def _load(self, graph: _Graph, states: list[ItemState], key: BucketKey) -> None:
        """Point a graph at these states: when its items change, copy the new slot list in (and, for an eager
        bucket, rebuild its layout: device work, no sync); an unchanged batch replays as it is. Items, not slot
        numbers: a slot freed by a cancel is reused at once, and a stale layout would leave the newcomer's frames
        past the old item's length masked forever (H200 run 7: the codec then read the mask id and the worker
        died)."""
        serial = self.table.serial
        loaded = tuple(serial[s.slot] if s.slot is not None else -1 for s in states)
        if graph.loaded != loaded:
            graph.layout.slots.copy_(self._slot_ids(states, key.batch), non_blocking=True)
            if graph.layout_graph is not None:
                graph.layout_graph.replay()
            else:
                self.table.layout(graph.layout.slots, key.num_tokens, key.frames, out=graph.layout)
            graph.loaded = loaded

    def _run_eager(self, live: list[ItemState]) -> None:
        """A step at the batch's exact size (no bucket padding), through the same device packing."""
        num_tokens = sum(s.item.num_tokens for s in live)
        frames = max(s.item.num_frames for s in live)
        sampling = any(s.item.params.class_temperature > 0 for s in live)
        slots = self._slot_ids(live, len(live)).to(self.model.device, non_blocking=True)
        self._advance(self.table.layout(slots, num_tokens, frames), max(s.item.cond_len for s in live), sampling)

    def run(self, items: list[Any]) -> list[torch.Tensor]:
        """Decode prepared items to completion together → code grids [8, T_i] on the CPU."""
        states = [ItemState.start(it) for it in items]
        while not all(s.done for s in states):
            self.step(states)
        return [s.tokens.cpu() for s in states]

    @torch.inference_mode()
    def enqueue(self, items: list[Any]) -> list[torch.Tensor] | None:
        """Run items to completion as one graph replayed back to back with no host work between steps (the
        items advance together), without waiting: → their code grids [8, T_i] on the device, enqueued on the
        current stream. None when no graph fits the batch."""
        states = [ItemState.start(it) for it in items]
        key = self.bucket_key(states)
        graph = self._graph_for(key) if self.use_graphs else None
        if graph is None or graph.graph is None:
            return None
        assert isinstance(key, BucketKey)
        self._admit(states)
        self._load(graph, states, key)
        num_steps = max(len(it.reveal) for it in items)
        cuda_graph = graph.graph
        for _ in range(num_steps):
            cuda_graph.replay()
        self.stats.graph_hits += num_steps
        self.stats.steps += num_steps
        for s in states:
            s.step = len(s.item.reveal)
        self._finish(states)
        return [s.tokens for s in states]

    def run_graphed(self, items: list[Any]) -> list[torch.Tensor] | None:
        """enqueue(), then the grids on the CPU. None when no graph fits the batch."""
        grids = self.enqueue(items)
        return None if grids is None else [g.cpu() for g in grids]

    def decode(self, states_or_codes: list[Any]) -> list[Any]:
        """Finished code grids → waveforms: with codec graphs, in padded masked batches across lengths; else
        batched across items of equal length by the codec."""
        codes = [s.tokens if isinstance(s, ItemState) else s for s in states_or_codes]
        if not codes:
            return []
        # A grid with a code the codec has no entry for (a mask left unrevealed: an engine bug) would trip a
        # device-side assert in the codec's lookup and take the whole worker down; fail just these segments.
        # One reduction over all grids (the decode waits for them anyway).
        masked = int(to_host((torch.cat([c.reshape(-1) for c in codes]) >= self.model.mask_id).sum()))
        if masked:
            raise RuntimeError(f"finished grids hold the mask id at {masked} positions (unrevealed)")
        codec = self.codec_graphs if self.codec_graphs is not None else self.model.codec
        waves: list[Any] = codec.decode(codes)
        return waves

    def warm_codec(self, max_seconds: float = 10.0) -> int:
        """With codec graphs: compile the masked decoder's kernels and capture the graphs serving decodes land in
        (CodecGraphs.warm_up), under the capture lock → how many graphs were captured."""
        if self.codec_graphs is None:
            return 0
        with self._capture_lock:
            captured: int = self.codec_graphs.warm_up(max_seconds=max_seconds)
        return captured

    def codec_counts(self) -> tuple[int, int]:
        """(codec calls, items decoded) since start: graph replays and eager calls of the codec."""
        if self.codec_graphs is not None:
            return self.codec_graphs.stats.calls, self.codec_graphs.stats.items
        return self.model.codec.calls, self.model.codec.items

    # --------------------------------------------------------------------------------------- buckets
    def _graph_for(self, key: BucketKey | str) -> _Graph | None:
        if isinstance(key, str):
            self._miss(key)
            return None
        graph = self.graphs.get(key)
        if graph is None and self.capture_on_miss:
            graph = self.capture(key)
        if graph is None:
            self._miss("not_captured")
        return graph

    def _miss(self, reason: str) -> None:
        self.stats.miss_reasons[reason] = self.stats.miss_reasons.get(reason, 0) + 1

    def startup_keys(self, max_tokens: int, prefix_tokens: tuple[int, ...] = (64, 192)) -> list[BucketKey]:
        """Buckets worth capturing before serving: each batch bucket × utterance lengths of 2.5–15 s
        (frame buckets) × a short and a long conditioning prefix (design vs clone), up to max_tokens per step;
        small batches first (they carry the latency-critical first segments)."""
        keys: list[BucketKey] = []
        for num_b in self.batch_buckets:
            for frames in (64, 128, 192, 256, 384):
                for prefix in prefix_tokens:
                    tokens = _ceil_to(self.token_buckets, num_b * (2 * frames + prefix))
                    if tokens is None or tokens > max_tokens:
                        continue
                    key = BucketKey(tokens, num_b, frames)
                    if key not in keys:
                        keys.append(key)
        return keys

    def serving_keys(self, max_tokens: int, min_item_tokens: int = 100,
                     frames: tuple[int, ...] = (64, 128, 192, 256)) -> list[BucketKey]:
        """The buckets a serving worker's continuous batches land in: any number of items of min_item_tokens
        (a short sentence, ~45 frames) to 2.5 × the frame bucket tokens (cond + uncond rows: the text prefix
        is ~1 token per 2 frames), the longest of them under each frame bucket, up to max_tokens per step.
        Batches of live serving mix lengths, so unlike startup_keys (uniform batches) every token bucket such a
        mix can fill is listed. Small batches and short frame buckets first (first segments are short and
        latency-critical)."""
        keys: list[BucketKey] = []
        lo_items = 1
        for num_b in self.batch_buckets:
            for t in frames:
                lo = lo_items * min_item_tokens
                hi = min(num_b * (5 * t // 2), max_tokens)
                for tokens in self.token_buckets:
                    if tokens < lo or tokens > max_tokens:
                        continue
                    key = BucketKey(tokens, num_b, t)
                    if key not in keys:
                        keys.append(key)
                    if tokens >= hi:
                        break
            lo_items = num_b + 1
        return keys

    def capture_startup(self, max_tokens: int, max_seconds: float = 30.0,
                        keys: list[BucketKey] | None = None) -> int:
        """Capture keys (default startup_keys()) ahead, so no request pays for their capture, until
        max_seconds pass, max_graphs exist or free memory falls under min_free_bytes. → graphs captured now."""
        if not self.use_graphs:
            return 0
        t0 = time.perf_counter()
        before = len(self.graphs)
        for key in keys if keys is not None else self.startup_keys(max_tokens):
            if time.perf_counter() - t0 > max_seconds or self.capture(key) is None:
                break
        return len(self.graphs) - before

    def _empty_layout(self, key: BucketKey) -> Layout:
        """A bucket's layout buffers, holding the empty batch (every row the empty slot)."""
        slots = torch.full((key.batch,), self.table.empty, dtype=torch.long, device=self.model.device)
        return self.table.layout(slots, key.num_tokens, key.frames)

    @torch.inference_mode()
    def capture(self, key: BucketKey) -> _Graph | None:
        """Capture the step graph for one bucket (None when over max_graphs or the memory headroom). The warm-up
        runs and the capture see only the empty slot, so items in flight are untouched."""
        with self._capture_lock:
            return self._capture(key)

    def _capture(self, key: BucketKey) -> _Graph | None:
        if key in self.graphs:
            return self.graphs[key]
        if len(self.graphs) >= self.max_graphs:
            return None
        free, _ = torch.cuda.mem_get_info(self.model.device)
        if free < self.min_free_bytes:
            return None
        t0 = time.perf_counter()
        dev = self.model.device
        layout = self._empty_layout(key)  # the graphs' static buffers

        def lay_out() -> None:  # the layout of whatever slot list layout.slots holds, into its buffers
            self.table.layout(layout.slots, key.num_tokens, key.frames, out=layout)

        stream = torch.cuda.Stream(dev)  # type: ignore[no-untyped-call]
        stream.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(stream):
            for _ in range(2):  # warm up: Triton compilation, cuBLAS handles, allocator
                lay_out()
                self._advance(layout, key.num_tokens)
        torch.cuda.current_stream(dev).wait_stream(stream)
        layout_graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(layout_graph, pool=self._pool):
            lay_out()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            self._advance(layout, key.num_tokens)
        entry = _Graph(graph=graph, layout=layout, layout_graph=layout_graph)
        self.graphs[key] = entry
        self.stats.graphs_captured += 1
        self.stats.capture_s += time.perf_counter() - t0
        log.info("captured step graph %s in %.2f s", key, time.perf_counter() - t0)
        return entry
