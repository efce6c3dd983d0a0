"""Admission control of one OmniVoice worker: refuse at once the new work it cannot start in time.

Owns the worker's measured step-time model (seconds of one step as a function of its tokens, fitted online
from the steps the loop runs) and the prediction of when a newly submitted segment would run its first step,
given what the scheduler holds. The worker asks it for every segment that opens a request or a turn
(priority 0): when the predicted start is later than the configured wait, the segment is refused with
Overloaded and a retry-after of the predicted wait, within one loop iteration of its arrival, instead of
queueing without bound. Segments of a response already playing are never refused (cutting a stream is worse
than a late sentence).

The start-delay arithmetic and the refusal rule are engine/admission.py's (the web process refuses early with
the same arithmetic on the worker's reports). Plain Python with an injected clock (like scheduler.py):
unit-tested without a GPU. Must not import torch, numpy or the model.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from realtime_tts.engine.admission import Decision, decide, start_delay_steps


@dataclass
class StepClock:
    """Step time as a + b × tokens, fitted by exponentially weighted least squares over the steps the loop
    ran back to back (the period between two step ends while the loop was busy: under load that is the card's
    step time, since the host runs ahead of it). half_life: steps after which an old step weighs half.

    Until `min_steps` steps were seen it knows nothing (seconds() is None): a cold worker refuses nothing."""

    half_life: float = 200.0
    min_steps: int = 20
    _w: float = 0.0
    _sx: float = 0.0
    _sy: float = 0.0
    _sxx: float = 0.0
    _sxy: float = 0.0
    _n: int = 0

    def observe(self, tokens: int, seconds: float) -> None:
        if tokens <= 0 or not seconds > 0:
            return
        keep = 0.5 ** (1.0 / self.half_life)
        self._w = self._w * keep + 1.0
        self._sx = self._sx * keep + tokens
        self._sy = self._sy * keep + seconds
        self._sxx = self._sxx * keep + tokens * tokens
        self._sxy = self._sxy * keep + tokens * seconds
        self._n += 1

    @property
    def num_steps(self) -> int:
        return self._n

    def coefficients(self) -> tuple[float, float] | None:
        """(a seconds, b seconds per token), or None while cold. When the observed steps all had about the
        same size the slope is not identifiable: then steps are taken as proportional to tokens (a = 0), which
        over-predicts bigger steps' cost (refuses a little early rather than late)."""
        if self._n < self.min_steps or self._w <= 0:
            return None
        mx, my = self._sx / self._w, self._sy / self._w
        var = self._sxx / self._w - mx * mx
        if var > (0.05 * mx) ** 2:
            b = (self._sxy / self._w - mx * my) / var
            a = my - b * mx
            if b > 0 and a >= 0:
                return a, b
        return 0.0, my / mx

    def seconds(self, tokens: int) -> float | None:
        c = self.coefficients()
        return None if c is None else c[0] + c[1] * tokens


@dataclass
class Admission:
    """The worker's admission rule: predicted start of a new first segment vs max_wait_s."""

    max_wait_s: float  # 0 = admit everything
    budget: int  # tokens one step holds at most (the scheduler's max_batch_tokens)
    clock: StepClock
    num_refused: int = 0

    def decide(self, running: Iterable[tuple[int, int]], waiting_ahead: int, tokens: int,
               num_steps: int) -> Decision:
        step_s = self.clock.seconds(self.budget)
        if self.max_wait_s <= 0 or step_s is None:
            return Decision(True, 0.0, 0)
        decision = decide(start_delay_steps(running, waiting_ahead, tokens, self.budget, num_steps) * step_s,
                          self.max_wait_s)
        if not decision.admit:
            self.num_refused += 1
        return decision
