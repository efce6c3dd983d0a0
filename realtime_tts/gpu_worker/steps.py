"""Load-adaptive diffusion steps of one OmniVoice worker: how many steps the segments that name none run.

The configured count (num_step, 32) whenever the card can meet every deadline in flight with it, fewer (down
to min_num_step) only when the worker's step-time model says it otherwise could not: a segment's step count is
the card's one lever on work per second of audio (work = tokens × steps), and a late sentence is worse than a
16-step one. Plain Python with an injected clock (like scheduler.py): unit-tested without a GPU. Must not
import torch, numpy or the model.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

# When a segment's last step must have ended, for segments that carry no deadline of their own (a stream
# segment's deadline_s is when its audio is needed): a first segment by the first-audio target of the service
# (service/planning.py FIRST_AUDIO_S, 300 ms), bulk work within this long of arrival.
FIRST_TARGET_S = 0.3
BULK_TARGET_S = 10.0
# The decode, the decode thread's queue and delivery after a segment's last step (H200, 350 agents: decodes of
# ~13 ms each with the decode thread ~90% busy).
DELIVERY_S = 0.08


@dataclass(frozen=True, slots=True)
class Work:
    """A live segment as the step choice sees it."""

    due_s: float  # time.monotonic() by which its last step must end
    tokens: int  # tokens it adds to every step
    steps_left: int
    adjustable: bool  # not started and its steps are the worker's to choose: it runs the level's count


def due_s(priority: int, deadline_s: float | None, arrival_s: float) -> float:
    """When a segment's last step must end: its own deadline less delivery, else its class's target."""
    if deadline_s is not None:
        return deadline_s - DELIVERY_S
    return arrival_s + (FIRST_TARGET_S if priority <= 0 else BULK_TARGET_S)


@dataclass
class StepChooser:
    """The step level: the count every segment whose steps are the worker's to choose runs, set by deadlines.

    The card, run flat out at headroom × `capacity` token-steps per second in deadline order (earliest first,
    as a fluid), must end every live segment's steps by its due time. Started segments keep what they have
    left; the adjustable ones (not started, no num_step of their own) all run the level's count: num_step when
    that meets every deadline, else the most that does (a uniform cut: no one segment is singled out), never
    fewer than min_num_step. The loop remakes waiting segments when the level moves (down under a burst, back
    up as it drains), so the cut reaches work already queued, not only what arrives next. A deadline already
    past is no constraint (nothing helps it); its work still runs first.

    capacity comes from the caller (the step clock: a full step's tokens over its measured time); None (a cold
    worker, nothing measured) gives the full count.
    """

    num_step: int = 32
    min_num_step: int = 16
    headroom: float = 0.9
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        if not 1 <= self.min_num_step <= self.num_step:
            raise ValueError(f"need 1 <= min_num_step ({self.min_num_step}) <= num_step ({self.num_step})")
        if not 0 < self.headroom <= 1:
            raise ValueError(f"headroom must be in (0, 1], got {self.headroom}")

    @property
    def adaptive(self) -> bool:
        return self.min_num_step < self.num_step

    def level(self, live: Iterable[Work], capacity: float | None) -> int:
        """The step count of the adjustable segments among `live` (a new one included by the caller)."""
        if not self.adaptive or capacity is None or capacity <= 0:
            return self.num_step
        now = self.clock()
        rate = self.headroom * capacity
        fixed = 0.0  # token-steps due so far that do not follow the level
        scaled = 0.0  # token-steps due so far that do, at the full count
        share = 1.0  # the level as a share of num_step
        for w in sorted(live, key=lambda w: w.due_s):
            if w.adjustable:
                scaled += w.tokens * self.num_step
            else:
                fixed += w.tokens * w.steps_left
            if w.due_s > now and scaled > 0:
                room = rate * (w.due_s - now) - fixed
                if room < share * scaled:
                    share = room / scaled
        return max(self.min_num_step, min(self.num_step, math.floor(self.num_step * share + 1e-9)))
