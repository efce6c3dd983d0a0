"""Device → host copies of the worker's threads through pinned memory, waited for on an event.

Tensor.cpu() copies into pageable memory: the CUDA driver stages such a copy and the calling thread blocks in the
driver until the stream reaches it. Under serving load on the H200 (session 9 stack samples, 1500 HTTP requests
at 150/s) the step loop's own small asynchronous copies took 0.2-0.6 ms each while the decode thread sat in such
copies (the continuity codes, the mask check, the decoded audio); the copies here avoid that path. The wait
sleeps (a blocking-sync event) instead of spinning: the callers are the decode thread's, which may wait a step or
two for the GPU. Spinning, that thread used a CPU core all the time (26.6 ms of CPU per 27.3 ms step at 128 items
in flight; sleeping, 1.05 ms); sleeping cut the worker process's CPU time under serving load by 31-39% with the
same latencies (session 10, H200: bench/results/omnivoice_serve_h200.md). Worker processes only (torch).
"""

from __future__ import annotations

import torch


def to_host(src: torch.Tensor) -> torch.Tensor:
    """src on the host: a CUDA tensor is copied into fresh pinned memory on the current stream, then the thread
    waits for that copy's event; a host tensor is returned as it is."""
    if src.device.type != "cuda":
        return src
    host = torch.empty(src.shape, dtype=src.dtype, pin_memory=True)
    host.copy_(src, non_blocking=True)
    done = torch.cuda.Event(blocking=True)  # type: ignore[no-untyped-call]
    done.record()
    done.synchronize()
    return host


def to_device(src: torch.Tensor, dst: torch.Tensor) -> None:
    """Copy a host tensor into a device tensor without a pageable transfer: staged in pinned memory (kept by the
    caching host allocator until the copy, enqueued on the current stream, has run)."""
    if dst.device.type == "cuda" and src.device.type == "cpu":
        src = src.pin_memory()
    dst.copy_(src, non_blocking=True)
