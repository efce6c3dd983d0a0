"""Step-level scheduler of one OmniVoice worker: which segments run the next diffusion step.

Plain Python with an injected clock, so it is unit-tested without a GPU. Must not import torch, numpy or
the model: it only sees request ids, token counts, step counts, priorities and deadlines.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise

# Priority classes of engine.base (0 first segment of a turn, 1 live stream, 2 bulk). An item that has
# waited longer than max_wait_s since it last ran is promoted above all of them: nothing starves.
_CLASS_AGED = -1


@dataclass(slots=True)
class _Item:
    request_id: str
    num_tokens: int  # tokens this item adds to one step: cond row + uncond row
    num_steps: int
    priority: int
    deadline_s: float | None
    arrival_s: float
    seq: int  # arrival order: the last tie-breaker, so ordering is total and stable
    steps_done: int = 0
    first_step_s: float | None = None
    last_run_s: float | None = None


@dataclass(frozen=True, slots=True)
class StepPlan:
    """What the worker does now: run one step for `batch`, free the state of `cancelled`."""

    batch: tuple[str, ...]  # in priority order
    started: tuple[str, ...]  # the part of batch that runs its first step now
    cancelled: tuple[str, ...]  # cancelled since the last plan, whether started or not
    num_tokens: int  # tokens in this step (sum over batch)
    budget: int  # the token budget this step was packed under


@dataclass(frozen=True, slots=True)
class SchedulerStats:
    num_waiting: int  # admitted, no step run yet
    num_running: int  # at least one step run, not finished
    num_steps_run: int  # steps planned since creation
    num_finished: int
    num_cancelled: int


@dataclass(frozen=True, slots=True)
class StepTimeModel:
    """Predicted seconds of one step from its token count: piecewise linear through calibration points
    (tokens, seconds), extended past the last point at the average slope. Data measured on the serving
    device (step time plus the host's per-step work), so the policy holds no device numbers of its own."""

    points: tuple[tuple[int, float], ...]

    def __post_init__(self) -> None:
        pts = self.points
        if len(pts) < 2:
            raise ValueError(f"step_model needs at least 2 (tokens, seconds) points, got {len(pts)}")
        for (x0, y0), (x1, y1) in pairwise(pts):
            if not (x1 > x0 >= 0 and y1 >= y0 > 0):
                raise ValueError(f"step_model points must rise in tokens and not fall in seconds (> 0): {pts}")
        if not pts[-1][1] > pts[0][1]:
            raise ValueError(f"step_model: the last point must take longer than the first: {pts}")

    @classmethod
    def from_buckets(cls, buckets: list[tuple[int, float]] | tuple[tuple[int, float], ...],
                     host_s: float = 0.0) -> StepTimeModel:
        """The staircase of a runner whose steps cost their token bucket: (bucket tokens, seconds of a step in
        it) → a step of n tokens costs the smallest bucket holding n tokens (runner.bucket_key), plus host_s of
        host work per step."""
        points: list[tuple[int, float]] = []
        lo = 0
        for top, seconds in sorted(buckets):
            if top > lo + 1:
                points += [(lo + 1, seconds + host_s), (top, seconds + host_s)]
            lo = top
        return cls(tuple(points))

    def __call__(self, tokens: int) -> float:
        pts = self.points
        for (x0, y0), (x1, y1) in pairwise(pts):
            if tokens <= x1:
                return y0 + (y1 - y0) * max(0, tokens - x0) / (x1 - x0)
        return pts[-1][1] + self._slope() * (tokens - pts[-1][0])

    def _slope(self) -> float:
        # past the last point: the average slope over all points (a flat last stair must not make steps free)
        (x0, y0), (x1, y1) = self.points[0], self.points[-1]
        return (y1 - y0) / (x1 - x0)

    def max_tokens_within(self, seconds: float) -> int:
        """The most tokens one step may hold and still take at most `seconds` (0 when not even an empty one)."""
        pts = self.points
        if seconds < pts[0][1]:
            return 0
        for (x0, y0), (x1, y1) in pairwise(pts):
            if seconds < y1:
                return int(x0 + (x1 - x0) * (seconds - y0) / (y1 - y0))
        return int(pts[-1][0] + (seconds - pts[-1][1]) / self._slope())

    def min_tokens_for_rate(self, tokens_per_s: float, cap: int) -> int:
        """The fewest tokens per step (≤ cap) whose steps process at least tokens_per_s; cap if none does."""
        # On a segment y = y0 + k (x - x0): x / y ≥ r  ⇔  x (1 - r k) ≥ r (y0 - k x0)
        for (x0, y0), (x1, y1) in pairwise((*self.points, (cap, self(cap)))):
            if x0 >= cap:
                break
            k = (y1 - y0) / (x1 - x0) if x1 > x0 else 0.0
            lo, hi = max(x0, 1), min(x1, cap)
            if hi / self(hi) < tokens_per_s:
                continue
            if lo / self(lo) >= tokens_per_s:
                return lo
            x = tokens_per_s * (y0 - k * x0) / (1 - tokens_per_s * k)  # 1 - r k > 0 here: the ratio rises
            return min(hi, max(lo, math.ceil(x)))
        return cap


@dataclass
class Scheduler:
    """Iteration-level continuous batching with a per-step token budget and deadline priority.

    Every call to schedule() picks the batch for one diffusion step from all live items: a new item joins at
    the next step, a finished one leaves after its last (complete_step), a cancelled one is dropped at the
    next plan. Items that waited longer than max_wait_s since they last ran come first (nothing starves); an
    item that alone exceeds the budget still runs when it heads the order (alone), so an oversized segment
    cannot block the worker. Started items that do not fit simply pause: their state is their codes, which
    keep between steps. Two policies order the rest and size the budget:

    - class policy (step_model None): by (priority class, deadline, arrival), packed greedily into
      max_batch_tokens, or, while a first segment or an urgent stream segment is live, into
      max(latency_batch_tokens, tokens of all urgent items) capped at max_batch_tokens; either raised to the
      top of its token bucket (token_buckets), which costs the step nothing more.
    - deadline policy (step_model given): every item has a deadline (its own, or arrival + the target of its
      class) by which its last step must end. τ, the longest step every item allows, is the least
      (deadline − now) / remaining steps (a late item allows only a step of its own size). Urgent items,
      whose deadline is within urgency × remaining steps × a busy step (latency_batch_tokens), all run,
      however long that makes the step (under overload: throughput, not a queue), unless a smaller step
      carries more tokens per second (a full lower CUDA-graph bucket); the rest, in slack order
      (deadline − remaining steps × predicted step time), fill the step up to the most tokens the step
      model says fit in τ, and up to the end of the step's token bucket, which costs nothing more.
    """

    max_batch_tokens: int
    # While a first segment (or a stream segment due within urgent_s) is live, steps are packed under this
    # smaller budget: fewer tokens per step → shorter steps → its 32 steps end sooner. It only cuts
    # non-urgent work: urgent items alone may fill a step up to max_batch_tokens. None = no switch.
    # Deadline policy: the size of a busy step, against which urgency is judged (None: max_batch_tokens).
    latency_batch_tokens: int | None = None
    urgent_s: float = 0.5
    max_batch_items: int = 256
    max_wait_s: float = 2.0
    max_active: int = 1024  # started-but-unfinished items held in memory at most
    # While items run, new ones join at most once per admit_interval_s, together: the batch then changes
    # less often, and a step whose batch equals the last one's replays without the runner re-packing its
    # inputs (host work that grows with the batch). With nothing running a new item starts at once. 0 = every
    # new item joins at the next step.
    admit_interval_s: float = 0.0
    # Deadline policy: (tokens, seconds) calibration points of one step on this device, host work included
    # (or a StepTimeModel). None = the class policy above.
    step_model: StepTimeModel | tuple[tuple[int, float], ...] | None = None
    # Deadline policy: the last step of an item that came without a deadline ends this long after add(), by
    # class (a first segment; a stream segment queued before its response's first audio; bulk). An item's
    # own deadline_s is moved deadline_margin_s earlier (the decode and delivery after its last step). The
    # first-segment target is a wish, not the 300 ms: later work fills steps only as far as it
    # allows, so aim low (bench/results/omnivoice_sched_sim.md: N=25 p95 first audio 99 ms at 0.1 s, 184 ms
    # at 0.2 s, which only spends the slack on later segments; the same from N=50 up).
    first_deadline_s: float = 0.1
    stream_deadline_s: float = 1.0
    bulk_deadline_s: float = 10.0
    deadline_margin_s: float = 0.03
    # Deadline policy: an item is urgent once less than urgency × its remaining steps × a busy step's
    # predicted time (latency_batch_tokens) is left before its deadline.
    urgency: float = 1.0
    # Deadline policy: also size steps to carry the work due by each deadline in time (bench/
    # omnivoice_sched_sim.py: no better with deadlines that tell when audio is needed, worse with the
    # service's early ones, which it reads as overload; off).
    demand_budget: bool = False
    # The runner's token buckets, ascending (a step costs the smallest one holding its tokens; () = unknown).
    # Class policy: a budget that falls inside a bucket is raised to the bucket's top (at most max_batch_tokens):
    # those tokens cost no more time, so later work rides along for free.
    token_buckets: tuple[int, ...] = ()
    clock: Callable[[], float] = time.monotonic
    _items: dict[str, _Item] = field(default_factory=dict, init=False)
    _cancelled: list[str] = field(default_factory=list, init=False)
    _seq: int = field(default=0, init=False)
    _num_steps_run: int = field(default=0, init=False)
    _num_finished: int = field(default=0, init=False)
    _num_cancelled: int = field(default=0, init=False)
    _last_admit_s: float = field(default=-math.inf, init=False)
    _model: StepTimeModel | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.max_batch_tokens < 1:
            raise ValueError(f"max_batch_tokens must be >= 1, got {self.max_batch_tokens}")
        if self.max_batch_items < 1:
            raise ValueError(f"max_batch_items must be >= 1, got {self.max_batch_items}")
        if self.latency_batch_tokens is not None and self.latency_batch_tokens < 1:
            raise ValueError(f"latency_batch_tokens must be >= 1, got {self.latency_batch_tokens}")
        if self.max_active < 1:
            raise ValueError(f"max_active must be >= 1, got {self.max_active}")
        if self.admit_interval_s < 0:
            raise ValueError(f"admit_interval_s must be >= 0, got {self.admit_interval_s}")
        for name in ("first_deadline_s", "stream_deadline_s", "bulk_deadline_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if any(b1 <= b0 for b0, b1 in pairwise(self.token_buckets)) or any(b < 1 for b in self.token_buckets):
            raise ValueError(f"token_buckets must be positive and ascending, got {self.token_buckets}")
        if not self.urgency > 0:
            raise ValueError(f"urgency must be > 0, got {self.urgency}")
        if self.deadline_margin_s < 0:
            raise ValueError(f"deadline_margin_s must be >= 0, got {self.deadline_margin_s}")
        if self.step_model is not None:
            m = self.step_model
            self._model = m if isinstance(m, StepTimeModel) else StepTimeModel(tuple((int(t), float(x)) for t, x in m))

    def add(self, request_id: str, *, num_tokens: int, num_steps: int, priority: int = 2,
            deadline_s: float | None = None) -> None:
        """Admit a segment; it can run from the next schedule() on."""
        if request_id in self._items:
            raise ValueError(f"request_id {request_id!r} is already scheduled")
        if num_tokens < 1 or num_steps < 1:
            raise ValueError(f"num_tokens and num_steps must be >= 1, got {num_tokens}, {num_steps}")
        self._seq += 1
        self._items[request_id] = _Item(request_id, num_tokens, num_steps, priority, deadline_s,
                                        self.clock(), self._seq)

    def cancel(self, request_id: str) -> bool:
        """Drop a segment before the next step. False if unknown (finished, cancelled or never added)."""
        if self._items.pop(request_id, None) is None:
            return False
        self._cancelled.append(request_id)
        self._num_cancelled += 1
        return True

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._items

    def __len__(self) -> int:
        return len(self._items)

    def _key(self, item: _Item, now: float) -> tuple[int, float, int]:
        since = item.last_run_s if item.last_run_s is not None else item.arrival_s
        if now - since > self.max_wait_s:
            # aged: the longest-unserved first, whatever its class
            return (_CLASS_AGED, since, item.seq)
        deadline = item.deadline_s if item.deadline_s is not None else math.inf
        return (item.priority, deadline, item.seq)

    def schedule(self) -> StepPlan:
        """Choose the batch of the next step (may be empty when nothing is live)."""
        now = self.clock()
        cancelled, self._cancelled = tuple(self._cancelled), []
        num_active = sum(1 for it in self._items.values() if it.steps_done > 0)
        admit = num_active == 0 or now - self._last_admit_s >= self.admit_interval_s
        if self._model is None:
            order = sorted(self._items.values(), key=lambda it: self._key(it, now))
            budget = self.budget(order, now)
        else:
            order, budget = self._deadline_plan(now, admit and num_active < self.max_active)
        batch: list[_Item] = []
        num_tokens = 0
        for item in order:
            if len(batch) >= self.max_batch_items:
                break
            if item.steps_done == 0 and (not admit or num_active >= self.max_active):
                continue
            if batch and num_tokens + item.num_tokens > budget:
                continue  # a smaller item further down may still fit
            batch.append(item)
            num_tokens += item.num_tokens
            if item.steps_done == 0:
                num_active += 1
            if num_tokens >= budget:
                break
        started = []
        for item in batch:
            if item.first_step_s is None:
                item.first_step_s = now
                started.append(item.request_id)
            item.last_run_s = now
        if batch:
            self._num_steps_run += 1
        if started:
            self._last_admit_s = now
        return StepPlan(tuple(it.request_id for it in batch), tuple(started), cancelled, num_tokens, budget)

    def deadline(self, item: _Item) -> float:
        """When the item's last step must end (deadline policy)."""
        if item.deadline_s is not None:
            return item.deadline_s - self.deadline_margin_s
        if item.priority <= 0:
            return item.arrival_s + self.first_deadline_s
        return item.arrival_s + (self.stream_deadline_s if item.priority == 1 else self.bulk_deadline_s)

    def _deadline_plan(self, now: float, admit: bool) -> tuple[list[_Item], int]:
        """Deadline policy: (items in schedule order, token budget of the next step)."""
        model = self._model
        assert model is not None
        live = [(it, self.deadline(it), it.num_steps - it.steps_done) for it in self._items.values()
                if admit or it.steps_done > 0]  # those that cannot start now do not size this step
        # The longest step every item allows: (time left) / (steps left), and for an item already too late
        # for that, a step of its own size: while it is late, nothing that can wait is added to its steps.
        tau = math.inf
        for it, deadline, remaining in live:
            tau = min(tau, max((deadline - now) / remaining, model(it.num_tokens)))
        fit = self.max_batch_tokens if tau == math.inf else min(self.max_batch_tokens, model.max_tokens_within(tau))
        # Urgent: less than `urgency` × its remaining steps × the step time of a busy batch (a step of
        # latency_batch_tokens, else max_batch_tokens) is left. Judged against that fixed step time, not this
        # step's: then one nearly late item, which shrinks τ, cannot make everything else look relaxed and
        # starve the worker into tiny steps. Urgent items all run together, whatever the step time then is:
        # sitting one out only makes it later, and when they do not fit in τ (more arrive than short steps can
        # carry) holding them all is what keeps up with arrivals. Work with more slack only fills the step up
        # to what τ allows.
        busy_s = model(self.latency_batch_tokens or self.max_batch_tokens)
        urgent = {it.request_id for it, deadline, remaining in live
                  if deadline - now <= self.urgency * remaining * busy_s}
        urgent_tokens = sum(it.num_tokens for it, _, _ in live if it.request_id in urgent)
        budget = min(self.max_batch_tokens, max(fit, urgent_tokens))
        if urgent_tokens > fit:
            budget = self._fullest_step(model, budget, max(fit, min(it.num_tokens for it, _, _ in live
                                                                   if it.request_id in urgent)))
        if self.demand_budget:
            budget = max(budget, self._demand_tokens(live, now, model))
        # Tokens the step takes at no extra predicted time (the rest of its CUDA-graph bucket) are free filler.
        budget = max(1, min(self.max_batch_tokens, max(budget, model.max_tokens_within(model(budget)))))
        step_s = model(budget)

        def key(item: _Item) -> tuple[int, float, int]:
            since = item.last_run_s if item.last_run_s is not None else item.arrival_s
            if now - since > self.max_wait_s:
                return (_CLASS_AGED, since, item.seq)
            slack = self.deadline(item) - (item.num_steps - item.steps_done) * step_s
            return (0 if item.request_id in urgent else 1, slack, item.seq)

        return sorted(self._items.values(), key=key), budget

    @staticmethod
    def _fullest_step(model: StepTimeModel, tokens: int, least: int) -> int:
        """More urgent work than τ allows: the budget in [least, tokens] that carries the most tokens per second.
        On a smooth model that is all of it; on a staircase (CUDA-graph buckets: a step costs its bucket) a
        full lower bucket can beat a barely used higher one, and the urgent items left out run next step
        (their slack, now the smallest, puts them first)."""
        best, best_rate = tokens, tokens / model(tokens)
        for x, _ in model.points:
            if least <= x < tokens and x / model(x) > best_rate:
                best, best_rate = x, x / model(x)
        return best

    def _demand_tokens(self, live: list[tuple[_Item, float, int]], now: float, model: StepTimeModel) -> int:
        """Throughput: by each deadline, the work of every item due by then (tokens × remaining steps) must be
        done, so steps must carry at least max over deadlines of (that work / time left) tokens per second. A
        deadline already out of reach counts its work (it runs) but not its window (nothing makes it)."""
        work = 0.0
        rate = 0.0
        for it, deadline, remaining in sorted(live, key=lambda e: e[1]):
            work += it.num_tokens * remaining
            if deadline - now >= remaining * model(it.num_tokens):
                rate = max(rate, work / (deadline - now))
        return model.min_tokens_for_rate(rate, self.max_batch_tokens) if rate > 0 else 1

    def budget(self, order: list[_Item], now: float) -> int:
        """Token budget of the next step under the class policy, given the live items in schedule order."""
        budget = self.max_batch_tokens
        if self.latency_batch_tokens is not None:
            urgent_tokens = sum(it.num_tokens for it in order if self._urgent(it, now))
            if urgent_tokens:
                # The small budget shortens steps by leaving the other work out, never urgent work: when first
                # segments pile up (every HTTP request's only segment is one), the step grows to hold them
                # all, up to max_batch_tokens. A fixed small budget capped throughput under load and let the
                # queue, and with it every first audio, grow without bound (H200 load run: 50 of 100 req/s).
                budget = min(budget, max(self.latency_batch_tokens, urgent_tokens))
        i = bisect.bisect_left(self.token_buckets, budget)  # the smallest bucket holding the budget
        return min(self.max_batch_tokens, self.token_buckets[i] if i < len(self.token_buckets) else budget)

    def _urgent(self, item: _Item, now: float) -> bool:
        if item.priority == 0:
            return True
        return item.priority == 1 and item.deadline_s is not None and item.deadline_s - now <= self.urgent_s

    def complete_step(self, plan: StepPlan) -> list[str]:
        """Record that plan's step ran; returns the ids that just ran their last step (they leave now).

        Items cancelled while the step ran are already gone and are skipped.
        """
        finished = []
        for request_id in plan.batch:
            item = self._items.get(request_id)
            if item is None:
                continue
            item.steps_done += 1
            if item.steps_done >= item.num_steps:
                del self._items[request_id]
                finished.append(request_id)
        self._num_finished += len(finished)
        return finished

    def queue_s(self, request_id: str) -> float | None:
        """Seconds the item waited from add() to its first step (None until it started)."""
        item = self._items.get(request_id)
        if item is None or item.first_step_s is None:
            return None
        return item.first_step_s - item.arrival_s

    def steps_done(self, request_id: str) -> int:
        item = self._items.get(request_id)
        return 0 if item is None else item.steps_done

    def load_ahead(self, priority: int) -> tuple[list[tuple[int, int]], int]:
        """What a new segment of this priority class would wait behind (admission.py), under the class order
        (started items of a later class pause for it): (tokens, steps left) of every started item of its class
        or a more urgent one, and the tokens of those not started yet."""
        ahead = [it for it in self._items.values() if it.priority <= priority]
        running = [(it.num_tokens, it.num_steps - it.steps_done) for it in ahead if it.steps_done]
        return running, sum(it.num_tokens for it in ahead if not it.steps_done)

    def live(self) -> list[tuple[str, int, float | None, float, int, int, bool]]:
        """(request_id, priority, deadline_s, arrival, tokens, steps left, started) of every live item (steps.py's
        view of the load)."""
        return [(it.request_id, it.priority, it.deadline_s, it.arrival_s, it.num_tokens,
                 it.num_steps - it.steps_done, it.steps_done > 0) for it in self._items.values()]

    def set_steps(self, request_id: str, num_steps: int) -> None:
        """A waiting item's step count changes (load-adaptive steps); a started one's is fixed."""
        item = self._items[request_id]
        if item.steps_done:
            raise ValueError(f"{request_id!r} has started: its step count is fixed")
        if num_steps < 1:
            raise ValueError(f"num_steps must be >= 1, got {num_steps}")
        item.num_steps = num_steps

    def stats(self) -> SchedulerStats:
        running = sum(1 for it in self._items.values() if it.steps_done > 0)
        return SchedulerStats(len(self._items) - running, running, self._num_steps_run, self._num_finished,
                              self._num_cancelled)
