"""Iterative masked decoding over a packed batch: one STEP = one forward over every item's cond and
uncond rows + vectorised scoring (CFG, log-softmax, token choice, layer penalty, position noise, per-item
top-k unmasking). Items may sit at different step indices; no Python loop over items inside a step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from realtime_tts.model.network import OmniVoiceModel
from realtime_tts.model.sequence import PreparedItem

NoiseMode = Literal["item", "reference"]
_TOPK_RATIO = 0.1  # class sampling keeps the top 10% of the audio vocabulary
_M32 = 0xFFFFFFFF


@dataclass
class ItemState:
    """One utterance in flight: its prepared sequence, current target grid and step index."""

    item: PreparedItem
    tokens: torch.Tensor  # [8, T] long, MASK where not yet revealed
    step: int = 0
    # A runner that keeps items on the device (gpu_worker/runner.py) holds the live grid in its slot `slot` and
    # writes it back to tokens when the item finishes; `ready` is then the device event after which tokens
    # is complete (None: already complete).
    slot: int | None = None
    ready: Any = None

    @classmethod
    def start(cls, item: PreparedItem, device: torch.device | str = "cpu") -> ItemState:
        return cls(item=item, tokens=item.cond_ids[:, item.cond_len - item.num_frames:].to(device).clone())

    @property
    def done(self) -> bool:
        return self.step >= len(self.item.reveal)


@dataclass
class PackedBatch:
    """A fixed set of items packed for stepping. Built once per batch composition (host work, a loop over
    items); step_packed() then runs without host loops. Rows: cond_0..cond_{B-1}, uncond_0..uncond_{B-1}."""

    ids: torch.Tensor  # [8, N] long
    audio_mask: torch.Tensor  # [N] bool
    positions: torch.Tensor  # [N] long, 0.. per row
    cu_seqlens: torch.Tensor  # [2B+1] int32
    max_seqlen: int
    cond_index: torch.Tensor  # [B, Tmax] long: packed position of each item's target frame t in its cond row
    uncond_index: torch.Tensor  # [B, Tmax] long: same in its uncond row (padding → 0)
    valid: torch.Tensor  # [B, Tmax] bool: t < T_i
    flat_valid: torch.Tensor  # [ΣT] long: indices of valid (b, t) in a flattened [B·Tmax]
    num_frames: torch.Tensor  # [B] long
    tokens: torch.Tensor  # [B, 8, Tmax] long: current target grids (padding = MASK)
    step: torch.Tensor  # [B] long
    reveal: torch.Tensor  # [B, max_steps + 1] long, 0 after the last step
    seed: torch.Tensor  # [B] long
    guidance: torch.Tensor  # [B] float32
    layer_penalty: torch.Tensor  # [B] float32
    position_temperature: torch.Tensor  # [B] float32
    class_temperature: torch.Tensor  # [B] float32
    any_class_sampling: bool
    items: list[PreparedItem] = field(default_factory=list)

    @property
    def batch_size(self) -> int:
        return len(self.items)

    @property
    def num_tokens(self) -> int:
        return int(self.ids.shape[1])


def pack(states: list[ItemState], device: torch.device | str) -> PackedBatch:
    """Pack items (any mix of lengths, modes and step indices) into one batch."""
    dev = torch.device(device)
    items = [s.item for s in states]
    num_b = len(items)
    frames = [it.num_frames for it in items]
    t_max = max(frames)
    cond_lens = [it.cond_len for it in items]
    row_lens = cond_lens + frames
    cu = [0]
    for n in row_lens:
        cu.append(cu[-1] + n)
    ids = torch.cat([it.cond_ids for it in items] + [it.cond_ids[:, it.cond_len - it.num_frames:] for it in items],
                    dim=1)  # [8, N]
    audio_mask = torch.cat([torch.arange(it.cond_len) >= it.audio_start for it in items]
                           + [torch.ones(t, dtype=torch.bool) for t in frames])  # [N]
    positions = torch.cat([torch.arange(n) for n in row_lens])  # [N]
    t_idx = torch.arange(t_max)
    frames_t = torch.tensor(frames)
    valid = t_idx[None, :] < frames_t[:, None]  # [B, Tmax]
    cond_start = torch.tensor([cu[b] + cond_lens[b] - frames[b] for b in range(num_b)])
    uncond_start = torch.tensor(cu[num_b:2 * num_b])
    cond_index = torch.where(valid, cond_start[:, None] + t_idx[None, :], 0)
    uncond_index = torch.where(valid, uncond_start[:, None] + t_idx[None, :], 0)
    max_steps = max(len(it.reveal) for it in items)
    reveal = torch.zeros(num_b, max_steps + 1, dtype=torch.long)
    for b, it in enumerate(items):
        reveal[b, :len(it.reveal)] = torch.tensor(it.reveal)
    tokens = torch.full((num_b, 8, t_max), _mask_id(items), dtype=torch.long)  # [B, 8, Tmax]
    for b, s in enumerate(states):
        tokens[b, :, :frames[b]] = s.tokens.cpu()
    batch = PackedBatch(
        ids=ids.to(dev), audio_mask=audio_mask.to(dev), positions=positions.to(dev),
        cu_seqlens=torch.tensor(cu, dtype=torch.int32, device=dev), max_seqlen=max(row_lens),
        cond_index=cond_index.to(dev), uncond_index=uncond_index.to(dev), valid=valid.to(dev),
        flat_valid=valid.flatten().nonzero()[:, 0].to(dev), num_frames=frames_t.to(dev),
        tokens=tokens.to(dev), step=torch.tensor([s.step for s in states], device=dev), reveal=reveal.to(dev),
        seed=torch.tensor([it.seed for it in items], dtype=torch.long, device=dev),
        guidance=_vec(items, "guidance_scale", dev), layer_penalty=_vec(items, "layer_penalty", dev),
        position_temperature=_vec(items, "position_temperature", dev),
        class_temperature=_vec(items, "class_temperature", dev),
        any_class_sampling=any(it.params.class_temperature > 0 for it in items), items=items)
    _write_targets(batch)
    return batch


def _mask_id(items: list[PreparedItem]) -> int:
    # The target region of a fresh cond row is all MASK; its last column holds the mask id.
    return int(items[0].cond_ids[0, -1])


def _vec(items: list[PreparedItem], name: str, dev: torch.device) -> torch.Tensor:
    return torch.tensor([float(getattr(it.params, name)) for it in items], dtype=torch.float32, device=dev)


def _write_targets(batch: PackedBatch) -> None:
    """Copy the current target grids into both rows of every item in the packed ids."""
    num_b, _, t_max = batch.tokens.shape
    flat = batch.tokens.permute(1, 0, 2).reshape(8, num_b * t_max)[:, batch.flat_valid]  # [8, ΣT]
    batch.ids[:, batch.cond_index.flatten()[batch.flat_valid]] = flat
    batch.ids[:, batch.uncond_index.flatten()[batch.flat_valid]] = flat


def unpack(batch: PackedBatch, states: list[ItemState]) -> None:
    """Write the batch's tokens and step indices back into the item states (before re-packing)."""
    steps = batch.step.tolist()
    for b, s in enumerate(states):
        s.tokens = batch.tokens[b, :, :s.item.num_frames].clone()
        s.step = steps[b]


# ---------------------------------------------------------------------------------------------------------------
# Noise. "item": counter-based hash of (seed, step, stream, index) — an item's noise does not depend on its
# batch-mates or padding, and is graph-capturable. "reference": the global torch RNG drawn in the released
# implementation's order (per step, per item in batch order, [class noise], position noise) for parity tests.
# ---------------------------------------------------------------------------------------------------------------


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    # x·c mod 2^32 without int64 overflow: split c into 16-bit halves.
    return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & _M32


def _mix32(x: torch.Tensor) -> torch.Tensor:
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def hash_uniform(seed: torch.Tensor, step: torch.Tensor, stream: int, index: torch.Tensor) -> torch.Tensor:
    """Uniform (0, 1) float32 noise; seed/step broadcast against index (int64, < 2^32)."""
    key = _mix32((seed >> 32) & _M32 ^ _mix32(step & _M32 ^ _mix32(torch.full_like(step, stream))))
    key = _mix32((seed & _M32) ^ key)
    h = _mix32(_mix32(key ^ index))
    return ((h >> 8).float() + 0.5) * (1.0 / (1 << 24))


def _gumbel(u: torch.Tensor) -> torch.Tensor:
    return -torch.log(-torch.log(u + 1e-10) + 1e-10)


def _reference_noise(batch: PackedBatch, k: torch.Tensor, vocab: int
                     ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Draw from the global RNG exactly as the released loop does (one torch.rand per item with k > 0, in
    batch order: class noise [1, 8, T, V] if sampling, then position noise [1, 8, T] if temperature > 0),
    and lay the draws out as [B, 8, Tmax(, V)]. Noise generation only; the scoring stays vectorised."""
    num_b, _, t_max = batch.tokens.shape
    dev = batch.tokens.device
    cls_noise = torch.zeros(num_b, 8, t_max, vocab, device=dev) if batch.any_class_sampling else None
    pos_noise = torch.zeros(num_b, 8, t_max, device=dev)
    ks = k.tolist()
    for b, it in enumerate(batch.items):
        if ks[b] <= 0:
            continue
        t = it.num_frames
        # Drawn on the model's device, as the reference's rand_like does (CPU and CUDA streams differ).
        if it.params.class_temperature > 0 and cls_noise is not None:
            cls_noise[b, :, :t] = torch.rand(1, 8, t, vocab, device=dev)[0]
        if it.params.position_temperature > 0:
            pos_noise[b, :, :t] = torch.rand(1, 8, t, device=dev)[0]
    return cls_noise, pos_noise


def item_noise(batch: PackedBatch, vocab: int) -> tuple[torch.Tensor | None, torch.Tensor]:
    t_max = batch.tokens.shape[2]
    dev = batch.tokens.device
    c = torch.arange(8, device=dev)[None, :, None]
    t = torch.arange(t_max, device=dev)[None, None, :]
    pos = c * batch.num_frames[:, None, None] + t  # [B, 8, Tmax]: index within the item's own 8·T grid
    seed, step = batch.seed[:, None, None], batch.step[:, None, None]
    pos_noise = hash_uniform(seed, step, 1, pos)
    cls_noise = None
    if batch.any_class_sampling:
        v = torch.arange(vocab, device=dev)
        cls_noise = hash_uniform(seed[..., None], step[..., None], 2, pos[..., None] * vocab + v)
    return cls_noise, pos_noise


# ---------------------------------------------------------------------------------------------------------------
# The step.
# ---------------------------------------------------------------------------------------------------------------


def score(c_logits: torch.Tensor, u_logits: torch.Tensor, batch: PackedBatch, mask_id: int,
          cls_noise: torch.Tensor | None, pos_noise: torch.Tensor | None) -> torch.Tensor:
    """fp32 logits [B, 8, Tmax, V] of the cond and uncond rows → new target grids [B, 8, Tmax]."""
    vocab = c_logits.shape[-1]
    g = batch.guidance[:, None, None, None]
    c = torch.log_softmax(c_logits, dim=-1)
    u = torch.log_softmax(u_logits, dim=-1)
    lp = torch.where(g != 0, torch.log_softmax(c + g * (c - u), dim=-1), c)  # [B, 8, Tmax, V]
    lp[..., mask_id] = -math.inf
    pred = lp.argmax(dim=-1)  # [B, 8, Tmax]
    if cls_noise is not None:
        top_val, top_idx = lp.topk(math.ceil(_TOPK_RATIO * vocab), dim=-1)
        filtered = torch.full_like(lp, -math.inf).scatter_(-1, top_idx, top_val)
        temp = batch.class_temperature[:, None, None, None]
        sampled = (filtered / temp.clamp(min=1e-30) + _gumbel(cls_noise)).argmax(dim=-1)
        pred = torch.where(batch.class_temperature[:, None, None] > 0, sampled, pred)
    conf = lp.max(dim=-1).values  # [B, 8, Tmax]
    return unmask(pred, conf, batch, mask_id, pos_noise)


def unmask(pred: torch.Tensor, conf: torch.Tensor, batch: PackedBatch, mask_id: int,
           pos_noise: torch.Tensor | None) -> torch.Tensor:
    """The light half of scoring, from chosen tokens and their confidences [B, 8, Tmax]: layer penalty,
    position noise, per-item top-k over still-masked positions → new target grids [B, 8, Tmax]. The runner's
    fused scoring kernel produces pred/conf itself and shares this half."""
    num_b, num_cb, t_max = pred.shape
    k = batch.reveal.gather(1, batch.step.clamp(max=batch.reveal.shape[1] - 1)[:, None])[:, 0]  # [B]
    layer = torch.arange(num_cb, device=conf.device)[None, :, None]
    scores = conf - layer * batch.layer_penalty[:, None, None]
    if pos_noise is not None:
        temp = batch.position_temperature[:, None, None]
        noisy = scores / temp.clamp(min=1e-30) + _gumbel(pos_noise)
        scores = torch.where(temp > 0, noisy, scores)
    blocked = (batch.tokens != mask_id) | ~batch.valid[:, None, :]
    scores = scores.masked_fill(blocked, -math.inf).flatten(1)  # [B, 8·Tmax]
    # Per-item top-k with per-item k: rank every position by score, keep rank < k.
    order = scores.argsort(dim=1, descending=True, stable=True)
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(order.shape[1], device=order.device)
                                            .expand_as(order))
    chosen = (rank < k[:, None]).view(num_b, num_cb, t_max)
    return torch.where(chosen, pred, batch.tokens)


@torch.inference_mode()
def step_packed(model: OmniVoiceModel, batch: PackedBatch, noise: NoiseMode = "item") -> None:
    """Run one diffusion step for every item of the batch (done items are carried along unchanged)."""
    hidden = model.hidden(batch.ids, batch.audio_mask, batch.positions, batch.cu_seqlens, batch.max_seqlen)
    c_logits = model.head(hidden[batch.cond_index]).permute(0, 2, 1, 3)  # [B, 8, Tmax, V]
    u_logits = model.head(hidden[batch.uncond_index]).permute(0, 2, 1, 3)
    if noise == "reference":
        k = batch.reveal.gather(1, batch.step[:, None].clamp(max=batch.reveal.shape[1] - 1))[:, 0]
        cls_noise, pos_noise = _reference_noise(batch, k, model.audio_vocab)
    else:
        cls_noise, pos_noise = item_noise(batch, model.audio_vocab)
    batch.tokens = score(c_logits, u_logits, batch, model.mask_id, cls_noise, pos_noise)
    batch.step = batch.step + (batch.step < batch.reveal.shape[1] - 1).long()
    _write_targets(batch)


def step(model: OmniVoiceModel, states: list[ItemState], noise: NoiseMode = "item") -> None:
    """One step for a list of item states (pack → step → write back). Schedulers that keep a batch across
    steps call pack / step_packed / unpack themselves."""
    live = [s for s in states if not s.done]
    if not live:
        return
    batch = pack(live, model.device)
    step_packed(model, batch, noise)
    unpack(batch, live)


def run(model: OmniVoiceModel, items: list[PreparedItem], noise: NoiseMode = "item") -> list[torch.Tensor]:
    """Decode items to completion in one packed batch (finished items stay in it, revealing nothing);
    → code grids [8, T_i] on the CPU."""
    states = [ItemState.start(it, model.device) for it in items]
    batch = pack(states, model.device)
    for _ in range(max(len(it.reveal) for it in items)):
        step_packed(model, batch, noise)
    unpack(batch, states)
    return [s.tokens.cpu() for s in states]
