"""Load-adaptive diffusion steps of one OmniVoice worker: how many steps a segment gets when it is admitted.

The configured count (num_step, 32) whenever the card can carry it, fewer (down to min_num_step) only when the
worker's step-time model says it otherwise could not: a segment's step count is the card's one lever on work
per second of audio (work = tokens × steps), and a late sentence is worse than a 16-step one. Plain Python with
an injected clock (like scheduler.py): unit-tested without a GPU. Must not import torch, numpy or the model.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

# When a segment's last step must have ended, for segments that carry no deadline of their own (a stream
# segment's deadline_s is when its audio is needed): a first segment by the first-audio target of the service
# (service/planning.py FIRST_AUDIO_S, 300 ms), bulk work within this long of arrival.
FIRST_TARGET_S = 0.3
BULK_TARGET_S = 10.0
# The decode and delivery after a segment's last step (the scheduler's deadline_margin_s).
DELIVERY_S = 0.03


@dataclass(frozen=True, slots=True)
class Work:
    """A live segment as the step choice sees it: when it must be done, and the token-steps it has left."""

    due_s: float  # time.monotonic() by which its last step must end
    token_steps: int  # tokens per step × steps left


def due_s(priority: int, deadline_s: float | None, arrival_s: float) -> float:
    """When a segment's last step must end: its own deadline less delivery, else its class's target."""
    if deadline_s is not None:
        return deadline_s - DELIVERY_S
    return arrival_s + (FIRST_TARGET_S if priority <= 0 else BULK_TARGET_S)


@dataclass
class StepChooser:
    """Chooses each new segment's step count in [min_num_step, num_step] from two limits, the lower one wins:

    - deadlines in flight: the card, run flat out at `capacity` token-steps per second in deadline order
      (earliest first, as a fluid), must end every live segment's steps by its due time with the new segment
      among them. The most steps the new segment may take so that no segment due at or after it misses.
    - sustained demand: the token-steps per second arriving at the full count (an exponentially decaying sum
      over window_s) may use at most `headroom` of capacity; past that, every segment's share is scaled down
      so the total fits. Without it a steady overload is only seen once the backlog already makes deadlines
      late; measured at the full count, the figure does not fall as steps are cut (no oscillation).

    capacity comes from the caller (the step clock: budget tokens per step ÷ predicted step time); None (a
    cold worker, nothing measured) gives the full count. A segment that named its num_step is not chosen but
    its work counts in the demand.
    """

    num_step: int = 32
    min_num_step: int = 16
    headroom: float = 0.9
    window_s: float = 3.0
    clock: Callable[[], float] = time.monotonic
    _demand: float = field(default=0.0, init=False)  # decaying sum of token-steps (full count) arrived
    _demand_at: float = field(default=-math.inf, init=False)

    def __post_init__(self) -> None:
        if not 1 <= self.min_num_step <= self.num_step:
            raise ValueError(f"need 1 <= min_num_step ({self.min_num_step}) <= num_step ({self.num_step})")
        if not 0 < self.headroom <= 1:
            raise ValueError(f"headroom must be in (0, 1], got {self.headroom}")
        if not self.window_s > 0:
            raise ValueError(f"window_s must be > 0, got {self.window_s}")

    @property
    def adaptive(self) -> bool:
        return self.min_num_step < self.num_step

    def demand(self) -> float:
        """Token-steps per second arriving (at the full count for chosen segments), over the last window."""
        now = self.clock()
        if self._demand_at > -math.inf:
            self._demand *= math.exp(-(now - self._demand_at) / self.window_s)
        self._demand_at = now
        return self._demand / self.window_s

    def choose(self, tokens: int, due: float, live: Iterable[Work], capacity: float | None) -> int:
        """The step count of a new segment of `tokens` per step due at `due`, admitted now beside `live`."""
        if not self.adaptive or capacity is None or capacity <= 0:
            return self.num_step
        n = min(self._by_deadlines(tokens, due, live, capacity), self._by_demand(tokens, capacity))
        return max(self.min_num_step, min(self.num_step, n))

    def admitted(self, tokens: int, num_steps: int, *, chosen: bool) -> None:
        """A segment was admitted with num_steps steps, chosen here or named by its request: its work counts as
        demand (a chosen one's at the full count, whatever it got)."""
        self.demand()
        self._demand += tokens * (self.num_step if chosen else num_steps)

    def _by_demand(self, tokens: int, capacity: float) -> int:
        rate = self.demand() + tokens * self.num_step / self.window_s
        allowed = self.headroom * capacity
        return self.num_step if rate <= allowed else math.floor(self.num_step * allowed / rate)

    def _by_deadlines(self, tokens: int, due: float, live: Iterable[Work], capacity: float) -> int:
        now = self.clock()
        ahead = 0.0  # token-steps of the live work due no later than the new segment (it runs first)
        later: list[Work] = []
        for w in live:
            if w.due_s <= due:
                ahead += w.token_steps
            else:
                later.append(w)
        # The new segment's own deadline, then each later one's: (work due by then + new) / capacity must fit.
        best = (capacity * (due - now) - ahead) / tokens
        done = ahead
        for w in sorted(later, key=lambda w: w.due_s):
            done += w.token_steps
            if capacity * (w.due_s - now) >= done:  # one already late whatever we do does not count
                best = min(best, (capacity * (w.due_s - now) - done) / tokens)
        return self.num_step if best >= self.num_step else max(0, math.floor(best + 1e-9))  # float noise
