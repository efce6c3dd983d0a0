"""slots.PinnedRing: staged host → device copies arrive intact while the GPU runs behind the host, across many
wraps of the ring (a half is rewritten only after its copies ran)."""

from __future__ import annotations

import pytest
import torch

from realtime_tts.gpu_worker.slots import PinnedRing


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_staged_copies_survive_wraps_while_the_gpu_is_behind() -> None:
    dev = torch.device("cuda")
    ring = PinnedRing(nbytes=64 * 1024)  # 32 KiB halves: the loop below wraps them ~60 times
    n, width = 4000, 123
    out = torch.zeros(n, width, dtype=torch.long, device=dev)
    a = torch.randn(2048, 2048, device=dev)
    for i in range(n):
        if i % 500 == 0:
            for _ in range(20):  # keep the stream busy: the copies queue up behind this work
                a = torch.tanh(a @ a)
        src = torch.arange(width, dtype=torch.long) + i * 1000  # a fresh host tensor each time, as the loop's
        out[i].copy_(ring.stage(src), non_blocking=True)
        del src  # the ring holds its own copy
    torch.cuda.synchronize()
    want = torch.arange(width, dtype=torch.long, device=dev) + 1000 * torch.arange(n, device=dev)[:, None]
    assert torch.equal(out, want)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_dtypes_shapes_and_an_oversized_tensor() -> None:
    dev = torch.device("cuda")
    ring = PinnedRing(nbytes=4096)
    for src in (torch.tensor([1.5, -2.25, 3.0, 0.125], dtype=torch.float32),
                torch.arange(24, dtype=torch.int32).view(3, 8),
                torch.tensor([7], dtype=torch.long),
                torch.arange(5000, dtype=torch.int32)):  # 20 KB: more than a half, pinned on its own
        staged = ring.stage(src)
        assert staged.is_pinned() and staged.dtype == src.dtype and staged.shape == src.shape
        dst = torch.empty_like(src, device=dev)
        dst.copy_(staged, non_blocking=True)
        torch.cuda.synchronize()
        assert torch.equal(dst.cpu(), src)
