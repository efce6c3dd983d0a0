"""Admission limits that do not depend on the engine: connections in total and per API key, requests per key per
second (token bucket). Plain counters on the event loop (no locks: one loop owns them).

Used by api/guard.py for every route; session mode and dialects get them for free. Leaf module: imports errors.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from realtime_tts.errors import PayloadTooLarge, RateLimited, TooManyConnections


def check_buffered(pending: int, incoming: int, limit: int) -> None:
    """A streaming context may hold at most `limit` characters not yet spoken (config limits.max_buffered_chars);
    raise PayloadTooLarge (413 / error frame + 1009, naming the field text) when `incoming` more would pass it.
    limit 0: no limit."""
    if limit and pending + incoming > limit:
        raise PayloadTooLarge(f"text: {pending} characters are still waiting to be spoken and {incoming} more would "
                              f"pass this context's limit of {limit} (max_buffered_chars); send more as audio "
                              "catches up", field="text", limit="max_buffered_chars")


class ConnectionLimiter:
    """Counts open connections (WebSockets and HTTP requests in flight), in total and per key.

    acquire() raises TooManyConnections (503 / 1013, retryable) over a limit; every successful acquire is
    matched by one release()."""

    def __init__(self, max_total: int, max_per_key: int):
        self.max_total = max_total
        self.max_per_key = max_per_key
        self.total = 0
        self.per_key: dict[str, int] = {}

    def acquire(self, key: str | None) -> str | None:
        """Take a slot (key None: not limited per key). Returns the name of the limit hit, or None on success."""
        if self.max_total and self.total >= self.max_total:
            return "max_connections"
        if key is not None and self.max_per_key and self.per_key.get(key, 0) >= self.max_per_key:
            return "max_connections_per_key"
        self.total += 1
        if key is not None:
            self.per_key[key] = self.per_key.get(key, 0) + 1
        return None

    def release(self, key: str | None) -> None:
        self.total -= 1
        if key is not None:
            left = self.per_key.get(key, 1) - 1
            if left > 0:
                self.per_key[key] = left
            else:
                self.per_key.pop(key, None)

    def refusal(self, limit: str) -> TooManyConnections:
        n = self.max_total if limit == "max_connections" else self.max_per_key
        scope = "on this server" if limit == "max_connections" else "for this API key"
        return TooManyConnections(f"too many open connections {scope} (limit {limit}={n}); retry when one closes",
                                  retry_after_ms=1000, limit=limit)


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


class RateLimiter:
    """Token bucket per key: `rate` requests per second, bursts of up to `burst`. rate 0: no limit."""

    def __init__(self, rate: float, burst: float | None = None, clock: Callable[[], float] = time.monotonic):
        self.rate = rate
        self.burst = burst if burst is not None else max(1.0, 2 * rate)
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}

    def check(self, key: str) -> None:
        """Spend one request of key's budget, or raise RateLimited with the wait until one is available."""
        if self.rate <= 0:
            return
        now = self._clock()
        b = self._buckets.get(key)
        if b is None:
            b = self._buckets[key] = _Bucket(self.burst, now)
        b.tokens = min(self.burst, b.tokens + (now - b.at) * self.rate)
        b.at = now
        if b.tokens >= 1.0:
            b.tokens -= 1.0
            return
        wait_ms = math.ceil((1.0 - b.tokens) / self.rate * 1000)
        raise RateLimited(f"more than {self.rate:g} requests per second for this API key (limit "
                          f"requests_per_key_per_s); retry after {wait_ms} ms", retry_after_ms=wait_ms,
                          limit="requests_per_key_per_s")
