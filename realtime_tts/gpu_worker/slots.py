"""Per-item decoding state kept on the device in fixed slots, and the packing of a step's batch on the device
from nothing but the step's slot numbers. A step's host work is then one small copy of [B] slot ids: no
re-pack when the batch changes, no host sync, graph-capturable. Worker processes only (torch).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from realtime_tts.errors import BadRequest
from realtime_tts.model.decoding import PackedBatch
from realtime_tts.model.sequence import MAX_FRAMES, MAX_STEPS, PreparedItem

# Target grids are padded to a multiple of this many frames (2.56 s) in a step (the runner's frame buckets) and
# in a slot. Few frame buckets, so the worker's start-up captures can cover every length serving meets up to
# 10 s (with 32, the 6-7 s later units of agent replies landed in 192-frame buckets the start-up had not
# captured: 25-31 captures mid-serving in every H200 run, ~50-90 ms each, during the first agent burst).
# Padding frames only costs scoring work (~1% of a step).
FRAME_QUANTUM = 64
# A slot's conditioning prefix (style, text, reference codes) holds at most this many tokens: ~80 s of clone
# reference at 25 Hz plus its text. Frames: a segment's longest target (sequence.MAX_FRAMES), whole quanta, so a
# step of the longest items still fits (runner.bucket_key also caps its frame bucket at the table's width).
MAX_PREFIX = 2048
MAX_SLOT_FRAMES = -(-MAX_FRAMES // FRAME_QUANTUM) * FRAME_QUANTUM
_INT_META = 4  # meta columns: prefix_len, frames, audio_start, seed
_FLOAT_META = 4  # fmeta columns: guidance, layer_penalty, position_temperature, class_temperature


class PinnedRing:
    """Pinned host memory that stages the loop's small host → device copies, reused round-robin in two halves.

    A copy is a memcpy into the ring and an asynchronous copy out of it, instead of a Tensor.pin_memory()
    allocation (through the caching host allocator) for each of a joining segment's copies and each batch change.
    (Session 9's H200 stack samples first put the step loop's lost time there; it was in the copies themselves,
    stalled by the decode thread's pageable copies: host_copy.py.) A half is written again only after the copies
    staged in it have run: switching halves records an event on the current stream, and coming back to a half
    waits for its event (at serving rates a half lasts ~0.5 s, so the wait is for work long done). Copies must be
    enqueued on one stream (the step loop's) for that event to cover them."""

    _ALIGN = 64

    def __init__(self, nbytes: int = 4 << 20) -> None:
        self._buf = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        self._half = nbytes // 2
        self._current = 0  # the half being written
        self._pos = 0  # the next free byte (within the current half)
        self._events: list[torch.cuda.Event | None] = [None, None]

    def stage(self, src: torch.Tensor) -> torch.Tensor:
        """A pinned copy of a host tensor, valid until the copy out of it has run on the current stream."""
        n = src.numel() * src.element_size()
        if n > self._half:
            return src.pin_memory()  # larger than a half (a prefix near MAX_PREFIX with many codebooks): rare
        if self._pos + n > (self._current + 1) * self._half:  # the rest of this half is too short: the other one
            event = torch.cuda.Event()  # type: ignore[no-untyped-call]
            event.record()
            self._events[self._current] = event
            self._current = 1 - self._current
            waiting = self._events[self._current]
            if waiting is not None:
                waiting.synchronize()
            self._pos = self._current * self._half
        view = self._buf[self._pos:self._pos + n].view(src.dtype).view(src.shape)
        view.copy_(src)
        self._pos += -(-n // self._ALIGN) * self._ALIGN
        return view


@dataclass
class Layout:
    """Where a batch's packed tokens and target frames come from (SlotTable.layout); shapes fixed by the bucket."""

    slots: torch.Tensor  # [Bb] long
    token_slot: torch.Tensor  # [N] long: the slot each packed token reads
    prefix_pos: torch.Tensor  # [N] long: its index in the slot's prefix (when in_prefix)
    grid_pos: torch.Tensor  # [N] long: its frame in the slot's grid (otherwise)
    in_prefix: torch.Tensor  # [N] bool
    pad: torch.Tensor  # [N] bool: past the last row
    audio_mask: torch.Tensor  # [N] bool
    positions: torch.Tensor  # [N] long
    cu_seqlens: torch.Tensor  # [2Bb+1] int32
    valid: torch.Tensor  # [Bb, Tb] bool
    cond_index: torch.Tensor  # [Bb, Tb] long
    uncond_index: torch.Tensor  # [Bb, Tb] long
    num_frames: torch.Tensor  # [Bb] long
    reveal: torch.Tensor  # [Bb, W] long
    seed: torch.Tensor  # [Bb] long
    fmeta: torch.Tensor  # [4, Bb] float32: guidance, layer penalty, position and class temperature


class SlotTable:
    """Device tables indexed by slot: the cond prefix and current target grid of every item in flight, its
    step index, reveal schedule and sampling parameters. The last slot is the empty item that pads a graph's
    batch rows (zero-length rows, never attended, its writes are ignored).

    assign() writes an item in (asynchronous copies staged in a pinned ring, enqueued on the current stream: the
    step loop's); layout() maps a [Bb] tensor of slots to packed positions (when a batch changes); pack() gathers a
    step's PackedBatch through a layout; write_back() stores a step's results. Slot reuse is safe without
    syncs: every use is stream-ordered.
    """

    def __init__(self, num_slots: int, num_codebooks: int, mask_id: int, device: torch.device | str,
                 max_prefix: int = MAX_PREFIX, max_frames: int = MAX_SLOT_FRAMES, max_steps: int = MAX_STEPS) -> None:
        dev = torch.device(device)
        self.device = dev
        self.num_codebooks = num_codebooks
        self.mask_id = mask_id
        self.max_prefix, self.max_frames = max_prefix, max_frames
        self.empty = num_slots  # the padding slot
        s = num_slots + 1
        c = num_codebooks
        # int32 tables (ids < 2^31): half the memory of long; ~120 MB at 1024 slots.
        self.prefix = torch.zeros(s, c, max_prefix, dtype=torch.int32, device=dev)  # [S, C, P]
        self.grid = torch.zeros(s, c, max_frames, dtype=torch.int32, device=dev)  # [S, C, F]
        self.meta = torch.zeros(s, _INT_META, dtype=torch.long, device=dev)  # [S, 4]
        self.fmeta = torch.zeros(s, _FLOAT_META, dtype=torch.float32, device=dev)  # [S, 4]
        self.reveal = torch.zeros(s, max_steps + 1, dtype=torch.long, device=dev)  # [S, W], 0 past the last step
        self.step = torch.zeros(s, dtype=torch.long, device=dev)  # [S]
        self._ring = PinnedRing() if dev.type == "cuda" else None
        self._free = list(range(num_slots - 1, -1, -1))
        # serial[slot]: which assignment occupies the slot. A freed slot is reused at once (by an item of another
        # length), so a cached layout is keyed by serials, never by slot numbers alone.
        self.serial = [0] * s
        self._serials = 0

    @property
    def num_free(self) -> int:
        return len(self._free)

    def check(self, item: PreparedItem) -> None:
        """Raise BadRequest when an item cannot live in a slot (its prefix or target is longer than a slot)."""
        prefix = item.cond_len - item.num_frames
        if prefix > self.max_prefix:
            raise BadRequest(f"the conditioning (instruct, text and reference audio) is {prefix} tokens, more than "
                             f"the {self.max_prefix} one segment may carry; use a shorter reference or text",
                             field="text")
        if item.num_frames > self.max_frames:
            raise BadRequest(f"one segment may last at most {self.max_frames // 25} s", field="text")

    def assign(self, item: PreparedItem, tokens: torch.Tensor, step: int = 0) -> int:
        """Take a free slot for an item whose current grid is tokens [C, T] at step index `step`."""
        self.check(item)
        if not self._free:
            raise RuntimeError("no free decoding slot (more items in flight than the table holds)")
        slot = self._free.pop()
        try:
            self._write(slot, item, tokens, step)
        except BaseException:
            self._free.append(slot)  # e.g. out of memory while staging: the slot is not lost
            raise
        self._serials += 1
        self.serial[slot] = self._serials
        return slot

    def _write(self, slot: int, item: PreparedItem, tokens: torch.Tensor, step: int) -> None:
        t = item.num_frames
        if tuple(tokens.shape) != (self.num_codebooks, t):  # copy_ would broadcast a short grid silently
            raise RuntimeError(f"grid {tuple(tokens.shape)} does not match the item's [{self.num_codebooks}, {t}]")
        prefix_len = item.cond_len - t
        reveal = torch.zeros(self.reveal.shape[1], dtype=torch.long)
        reveal[:len(item.reveal)] = torch.tensor(item.reveal, dtype=torch.long)
        p = item.params
        put = self._put
        put(self.meta[slot], torch.tensor([prefix_len, t, item.audio_start, item.seed], dtype=torch.long))
        put(self.step[slot:slot + 1], torch.tensor([step], dtype=torch.long))
        put(self.reveal[slot], reveal)
        put(self.fmeta[slot], torch.tensor([p.guidance_scale, p.layer_penalty, p.position_temperature,
                                            p.class_temperature], dtype=torch.float32))
        if prefix_len:
            put(self.prefix[slot, :, :prefix_len], item.cond_ids[:, :prefix_len].to(torch.int32))
        self.grid[slot].fill_(self.mask_id)
        if step or tokens.device.type != "cpu" or not bool((tokens == self.mask_id).all()):
            put(self.grid[slot, :, :t], tokens.to(torch.int32))  # a fresh item's grid is all masks: no copy

    def stage(self, src: torch.Tensor) -> torch.Tensor:
        """A host tensor ready for a non-blocking copy to the device (on CUDA: staged in pinned memory, valid
        until the copy, enqueued on the current stream, has run); other tensors as they are."""
        if self._ring is None or src.device.type != "cpu":
            return src
        return self._ring.stage(src)

    def _put(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """Copy into a table without waiting for the device."""
        dst.copy_(self.stage(src), non_blocking=True)

    def release(self, slot: int) -> None:
        self._free.append(slot)

    def tokens(self, slot: int, num_frames: int) -> torch.Tensor:
        """A fresh copy of a slot's grid [C, T] (long), enqueued on the current stream."""
        return self.grid[slot, :, :num_frames].long()

    def layout(self, slots: torch.Tensor, num_tokens: int, frames: int, out: Layout | None = None) -> Layout:
        """Where every packed token and target frame of the items in `slots` [Bb] (empty slot = padding row)
        comes from, packed into num_tokens tokens (≥ their total; the rest is padding after the last row) with
        target grids padded to `frames`. Depends only on the slot list (and the slots' tables), so it is rebuilt
        (into `out`, a bucket's static buffers) when the batch changes, not every step: by the bucket's captured
        layout graph, or eagerly. Device ops with fixed shapes (no host sync, graph-capturable). Rows: cond_0..cond_{Bb-1}, uncond_0..uncond_{Bb-1}; the empty slot's rows have length 0."""
        dev = slots.device
        num_b = slots.shape[0]
        prefix_len, num_frames, audio_start, seed = self.meta[slots].t()  # [Bb] each
        row_lens = torch.cat([prefix_len + num_frames, num_frames])  # [2Bb]
        cu = torch.cat([row_lens.new_zeros(1), row_lens.cumsum(0)])  # [2Bb+1]
        n = torch.arange(num_tokens, device=dev)
        row = torch.searchsorted(cu[1:], n, right=True)  # [N]; 2Bb for padding tokens
        pad = row >= 2 * num_b
        row = row.clamp(max=2 * num_b - 1)
        pos = n - cu[row]
        is_cond = row < num_b
        b = torch.where(is_cond, row, row - num_b)
        pl_n = prefix_len[b]
        t = torch.arange(frames, device=dev)
        valid = t[None, :] < num_frames[:, None]  # [Bb, Tb]
        fmeta = self.fmeta[slots].t()  # [4, Bb]
        new = Layout(
            slots=slots, token_slot=slots[b], prefix_pos=pos.clamp(max=self.max_prefix - 1),
            grid_pos=torch.where(is_cond, pos - pl_n, pos).clamp(0, self.max_frames - 1),
            in_prefix=is_cond & (pos < pl_n), pad=pad,
            audio_mask=torch.where(is_cond, pos >= audio_start[b], True) & ~pad, positions=pos.masked_fill(pad, 0),
            cu_seqlens=cu.to(torch.int32), valid=valid,
            # Invalid (padded) frames gather token 0: its logits are computed and never used.
            cond_index=torch.where(valid, (cu[:num_b] + prefix_len)[:, None] + t[None, :], 0),
            uncond_index=torch.where(valid, cu[num_b:2 * num_b][:, None] + t[None, :], 0),
            num_frames=num_frames.contiguous(), reveal=self.reveal[slots], seed=seed.contiguous(),
            fmeta=fmeta.contiguous())  # each row contiguous: kernels take plain pointers
        if out is None:
            return new
        for name in Layout.__dataclass_fields__:
            dst = getattr(out, name)
            if dst is not slots:
                dst.copy_(getattr(new, name))
        return out

    def pack(self, layout: Layout, max_seqlen: int, class_sampling: bool = False) -> PackedBatch:
        """The step's PackedBatch: the layout plus the items' current target grids and step indices, gathered
        from the slots (a few device ops; this part runs every step)."""
        ids = torch.where(layout.in_prefix[:, None], self.prefix[layout.token_slot, :, layout.prefix_pos],
                          self.grid[layout.token_slot, :, layout.grid_pos])  # [N, C]
        ids = ids.masked_fill(layout.pad[:, None], 0).t().contiguous().long()  # [C, N]
        frames = layout.valid.shape[1]
        grids = self.grid[layout.slots, :, :frames]  # [Bb, C, Tb]
        tokens = torch.where(layout.valid[:, None, :], grids, self.mask_id).long()
        fmeta = layout.fmeta
        return PackedBatch(
            ids=ids, audio_mask=layout.audio_mask, positions=layout.positions, cu_seqlens=layout.cu_seqlens,
            max_seqlen=max_seqlen, cond_index=layout.cond_index, uncond_index=layout.uncond_index,
            valid=layout.valid, flat_valid=layout.pad.new_empty(0, dtype=torch.long),  # decoding.pack's batches only
            num_frames=layout.num_frames, tokens=tokens, step=self.step[layout.slots], reveal=layout.reveal,
            seed=layout.seed, guidance=fmeta[0], layer_penalty=fmeta[1], position_temperature=fmeta[2],
            class_temperature=fmeta[3], any_class_sampling=class_sampling, items=[])

    def write_back(self, slots: torch.Tensor, tokens: torch.Tensor, step: torch.Tensor) -> None:
        """Store a step's new grids [Bb, C, Tb] and step indices [Bb] into the slots (padding rows write the
        empty slot, which nothing reads)."""
        frames = tokens.shape[2]
        self.grid[slots, :, :frames] = tokens.to(torch.int32)
        self.step[slots] = step
