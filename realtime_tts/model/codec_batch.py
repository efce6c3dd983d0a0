"""Exact batched codec decode across lengths: code grids of different lengths padded to one frame count and decoded
in one call, each item's waveform equal to its own unpadded decode up to float rounding; and the plan that cuts
a decode job into such calls.

Why padding can be made exact (HiggsAudioV2TokenizerModel.decode, read from transformers' modules):
- quantizer.decode (per codebook: embedding lookup, Linear project_out, summed) and fc2 (Linear) act on each
  frame alone: padded frames (any valid id, e.g. 0) leave the valid frames' latents untouched.
- The DAC decoder mixes frames only in its temporal convs, all zero-padded: conv1 (k7, "same"), each block's
  ConvTranspose1d (kernel 2s, stride s, padding ceil(s/2), output_padding s % 2, which HiggsAudioV2 sets: exactly
  T·s samples for T frames; its last samples read input frame T, which an unpadded decode does not have, i.e.
  reads as zero), each residual unit's conv1 (k7, dilation 1/3/9, "same") and the last conv2 (k7, "same"). The
  residual units' 1x1 convs, the Snake activations, the bias and residual adds are per sample.
- So if every temporal conv's input is zero past its item's valid length at that resolution (len · the product
  of the strides so far), each valid output sample sums exactly the terms of the unpadded decode (the unpadded
  conv's zero padding is our zeros). Snake(0) = 0, so zeroing the residual stream past the valid length zeroes
  the next conv's input as well. Masks go on: the decoder input, after conv1, after each upsampling conv and
  after each residual unit's add (the fused decoder masks the Snake outputs that feed the convs instead:
  kernels/dac_decoder.py). Samples past an item's valid length are garbage and are cut off.

decode_padded is the masked walk over the stock modules (plain torch: CPU or CUDA); a decoder switched to the fused
CUDA forward (gpu_worker/kernels/dac_decoder.py, class attribute `accepts_lengths`) is called with the lengths
and masks inside its own forward. Worker side only (torch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

HOP = 960  # samples per frame (24 kHz, 25 frames per second)


def pad_mask(lengths: torch.Tensor, scale: int, num_samples: int) -> torch.Tensor:
    """lengths [B] (frames, on the activations' device) → bool [B, 1, num_samples]: True past each item's valid
    length at a resolution of `scale` samples per frame (the positions to zero). No host syncs."""
    positions = torch.arange(num_samples, device=lengths.device)
    return positions[None, None, :] >= (lengths * scale)[:, None, None]


def latents(model: Any, codes: torch.Tensor) -> torch.Tensor:
    """codes [B, C, T] long → the acoustic decoder's input [B, D, T] (quantizer decode + fc2, as the model's
    decode does; each frame alone)."""
    quantized = model.quantizer.decode(codes.transpose(0, 1))  # [B, hidden, T]
    out: torch.Tensor = model.fc2(quantized.transpose(1, 2)).transpose(1, 2)
    return out


def masked_decoder_walk(decoder: Any, hidden: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """DAC's decoder forward over its own (stock or Snake-switched) modules, with every temporal conv's input zero
    past each item's valid length: hidden [B, D, T] (anything past lengths), lengths [B] frames → [B, 1, hop·T];
    samples past hop·lengths[i] are not meaningful."""
    scale = 1
    h = hidden.masked_fill(pad_mask(lengths, scale, hidden.shape[-1]), 0.0)
    h = decoder.conv1(h)
    h.masked_fill_(pad_mask(lengths, scale, h.shape[-1]), 0.0)
    for block in decoder.block:
        num_in = h.shape[-1]
        h = block.conv_t1(block.snake1(h))
        scale *= block.conv_t1.stride[0]
        assert h.shape[-1] == num_in * block.conv_t1.stride[0], "upsampling conv is not exactly T·stride"
        h.masked_fill_(pad_mask(lengths, scale, h.shape[-1]), 0.0)
        for unit in (block.res_unit1, block.res_unit2, block.res_unit3):
            h = unit(h)
            h.masked_fill_(pad_mask(lengths, scale, h.shape[-1]), 0.0)
    h = decoder.conv2(decoder.snake1(h))
    out: torch.Tensor = decoder.tanh(h)
    return out


def decode_padded(model: Any, codes: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """codes [B, C, T] long (valid ids everywhere; frames past lengths[i] are padding), lengths [B] long on the
    codes' device → float32 waveforms [B, hop·T], item i's first hop·lengths[i] samples equal to its own decode.
    No host syncs (safe inside CUDA graph capture)."""
    hidden = latents(model, codes)
    decoder = model.acoustic_decoder
    wave: torch.Tensor
    if getattr(decoder, "accepts_lengths", False):  # the fused CUDA forward masks inside itself
        wave = decoder(hidden, lengths=lengths)
    else:
        wave = masked_decoder_walk(decoder, hidden, lengths)
    return wave[:, 0].float()


def pad_grids(grids: Sequence[torch.Tensor], num_frames: int, num_rows: int | None = None,
              device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Grids [C, T_i] → (codes [rows, C, num_frames] long, zeros past each T_i; lengths [rows] long), on `device`
    (default: the first grid's). Rows past len(grids) have length 0."""
    rows = num_rows if num_rows is not None else len(grids)
    dev = torch.device(device) if device is not None else grids[0].device
    codes = torch.zeros(rows, grids[0].shape[0], num_frames, dtype=torch.long, device=dev)
    for j, g in enumerate(grids):
        codes[j, :, :g.shape[-1]] = g
    lengths = torch.tensor([g.shape[-1] for g in grids] + [0] * (rows - len(grids)), dtype=torch.long)
    return codes, lengths.to(dev)


# ------------------------------------------------------------------------------------------------ planning


@dataclass(frozen=True)
class Chunk:
    """One codec call: the job's items `items` (indices, longest first), padded to `frames` frames, in a batch of
    `rows` rows (rows ≥ len(items): the rest are empty, length 0)."""

    items: tuple[int, ...]
    frames: int
    rows: int


def round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def plan_chunks(lengths: Sequence[int], batch_buckets: Sequence[int] | None = (1, 2, 4, 8, 16),
                frame_step: int = 16, max_batch_frames: int = 2048, max_frames: int | None = None,
                max_pad_ratio: float = 1.5) -> list[Chunk]:
    """Cut a job of grids (their frame counts) into padded batched calls.

    Longest first; each chunk's frame count is its longest item's rounded up to frame_step (capped at max_frames;
    exact lengths when frame_step is 1); items join while the chunk stays within max_batch_frames (rows × frames)
    and the largest batch bucket, and no item is shorter than the longest over max_pad_ratio. A chunk's row
    count is a batch bucket: rounded up when at most a quarter of the rows would be empty, else cut down to the one below
    (the rest go to the next chunk); batch_buckets None: any row count. Items longer than max_frames (when
    given) only share chunks with each other, of exact length and row count (for the caller to decode eagerly).
    """
    buckets = sorted(batch_buckets) if batch_buckets is not None else None
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    chunks: list[Chunk] = []
    start = 0
    while start < len(order):
        first = max(1, lengths[order[start]])
        long = max_frames is not None and first > max_frames
        exact = long or buckets is None
        frames = first if long or frame_step <= 1 else round_up(first, frame_step)
        if max_frames is not None and not long:
            frames = min(frames, max_frames)
        max_rows = len(order) if exact or buckets is None else buckets[-1]
        count = 1
        while start + count < len(order) and count < max_rows:
            nxt = max(1, lengths[order[start + count]])
            if ((count + 1) * frames > max_batch_frames or max_pad_ratio * nxt < first
                    or (max_frames is not None and long != (nxt > max_frames))):
                break
            count += 1
        rows = count
        if not exact:
            assert buckets is not None
            up = next(b for b in buckets if b >= count)
            if up == count or ((up - count) * 4 <= up and up * frames <= max_batch_frames):
                rows = up
            else:
                rows = count = max(b for b in buckets if b <= count)
        chunks.append(Chunk(tuple(order[start:start + count]), frames, rows))
        start += count
    return chunks


@torch.inference_mode()
def decode_batched(model: Any, grids: Sequence[torch.Tensor], max_batch_frames: int = 2048,
                   max_pad_ratio: float = 1.5, device: torch.device | str | None = None) -> list[np.ndarray]:
    """Grids [C, T_i] → float32 waveforms [hop·T_i], eagerly, in padded masked calls of exact longest length (no
    frame rounding; plan_chunks with any row count), at most max_batch_frames (rows × frames) each; one host copy
    at the end."""
    if not grids:
        return []
    dev = torch.device(device) if device is not None else next(model.parameters()).device
    lengths = [int(g.shape[-1]) for g in grids]
    flat = torch.empty(HOP * sum(lengths), dtype=torch.float32, device=dev)
    offsets = np.concatenate([[0], np.cumsum(lengths)]) * HOP
    for chunk in plan_chunks(lengths, batch_buckets=None, frame_step=1,
                             max_batch_frames=max(max_batch_frames, max(lengths)), max_pad_ratio=max_pad_ratio):
        codes, lens = pad_grids([grids[i] for i in chunk.items], chunk.frames, device=dev)
        wave = decode_padded(model, codes, lens)  # [rows, hop·frames]
        for j, i in enumerate(chunk.items):
            flat[offsets[i]:offsets[i + 1]] = wave[j, :HOP * lengths[i]]
    host = flat.cpu().numpy()
    return [host[offsets[i]:offsets[i + 1]] for i in range(len(grids))]
