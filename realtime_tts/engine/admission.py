"""Admission arithmetic of the OmniVoice engine, shared by a worker and the web process: when a new first segment
would run its first step given the work ahead of it, and the refusal rule (wait over the limit → retry-after).

One place for the concern: gpu_worker/admission.py decides with it on what its scheduler holds; engine/client.py
decides with it at a request's arrival, on the worker's last load report (ipc.Stats: its step model, the work it
held) plus what the web process sent since. Plain Python: no torch, no numpy (both processes import it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

MIN_RETRY_MS = 100
MAX_RETRY_MS = 30_000


@dataclass(frozen=True, slots=True)
class Decision:
    admit: bool
    wait_s: float  # predicted wait before the segment's first step
    retry_after_ms: int  # when refused: the predicted wait beyond the limit, rounded up (at least MIN_RETRY_MS)


def start_delay_steps(running: Iterable[tuple[int, int]], waiting_ahead: int, tokens: int, budget: int,
                      num_steps: int) -> float:
    """Steps before a new segment of `tokens` tokens runs its first step, in the fluid view of continuous
    batching: a step holds `budget` tokens; the segment starts once the tokens ahead of it (every running
    segment, (tokens, steps left) each, plus `waiting_ahead` tokens queued before it) leave it room. Running
    segments free their tokens after their remaining steps; queued work ahead beyond that must itself pass
    through the batch, which turns over `budget` tokens every `num_steps` steps. A segment larger than the budget
    runs alone once nothing is ahead of it (the scheduler's rule), so it counts as one budget."""
    run = sorted(running, key=lambda r: r[1])
    excess = sum(t for t, _ in run) + waiting_ahead + min(tokens, budget) - budget
    if excess <= 0:
        return 0.0
    freed = 0
    last = 0
    for t, left in run:
        freed += t
        last = left
        if freed >= excess:
            return float(left)
    return last + (excess - freed) * num_steps / budget


def running_by_steps_left(running: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Running segments' (tokens, steps left) summed per steps left (at most one entry per step count): what a
    worker's load report carries. start_delay_steps gives the same answer on it as on the segments one by one."""
    by_left: dict[int, int] = {}
    for tokens, left in running:
        by_left[left] = by_left.get(left, 0) + tokens
    return sorted((t, left) for left, t in by_left.items())


def decide(wait_s: float, max_wait_s: float) -> Decision:
    """Admit when the predicted wait is within max_wait_s (0: admit everything); else refuse, retry after the
    excess."""
    if max_wait_s <= 0 or wait_s <= max_wait_s:
        return Decision(True, wait_s, 0)
    retry = min(MAX_RETRY_MS, max(MIN_RETRY_MS, math.ceil(1000 * (wait_s - max_wait_s))))
    return Decision(False, wait_s, retry)


@dataclass(frozen=True, slots=True)
class Backlog:
    """A worker's load as its last report stated it, for predictions after the report: the work it held (running
    segments grouped by steps left, first-segment tokens not started), its step time at its token budget, and
    the monotonic time of the report (system-wide on Linux: valid across processes)."""

    running: tuple[tuple[int, int], ...]
    waiting_tokens: int
    budget: int
    step_s: float
    at_s: float

    def wait_s(self, now_s: float, sent_tokens: int, tokens: int, num_steps: int) -> float:
        """Predicted wait of a new first segment of `tokens` tokens arriving at now_s, when `sent_tokens` tokens of
        first segments went to the worker after the report (queued ahead of it). In the fluid view the worker
        turns over what was ahead at full speed since the report, so the steps since then come off."""
        if self.step_s <= 0 or self.budget <= 0:
            return 0.0
        steps = start_delay_steps(self.running, self.waiting_tokens + sent_tokens, tokens, self.budget, num_steps)
        elapsed_steps = max(0.0, now_s - self.at_s) / self.step_s
        return max(0.0, steps - elapsed_steps) * self.step_s
