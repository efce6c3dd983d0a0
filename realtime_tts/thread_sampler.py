"""Where threads' wall time goes: a sampler thread reads chosen threads' Python stacks every few hundred
microseconds (sys._current_frames) and counts, per thread, the innermost frame ("self": that line was running,
or blocked in the C call it makes, or waiting for the GIL right there) and every function on the stack
("total"). Unlike cProfile (interpreter-wide since 3.12, and slowing every call) it only looks, so the threads
run at their own speed, and it counts time a thread spends waiting for the GIL or the GPU where it waits.

Used by bench/omnivoice_steploop.py (--sample: the loop thread) and by a GPU worker process when the server
runs with `serve --profile-worker PATH` (its step loop, decode and pipe-reader threads, written to
PATH.worker<N>.txt when the worker exits). Imports only the stdlib.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType


@dataclass
class _Counts:
    samples: int = 0
    self_counts: dict[str, int] = field(default_factory=dict)
    total_counts: dict[str, int] = field(default_factory=dict)


class StackSampler:
    """Samples the threads whose names `want` accepts (or the one thread_id), from a thread of its own."""

    def __init__(self, *, thread_id: int | None = None, want: Callable[[str], bool] | None = None,
                 period_s: float = 0.0005, top: int = 25) -> None:
        if (thread_id is None) == (want is None):
            raise ValueError("StackSampler needs exactly one of thread_id and want")
        self.thread_id, self.want, self.period_s, self.top = thread_id, want, period_s, top
        self.counts: dict[str, _Counts] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stack-sampler", daemon=True)
        self._t0 = self._t1 = 0.0

    def start(self) -> None:
        self._t0 = time.perf_counter()
        self._thread.start()

    def stop(self) -> str:
        """Stop sampling; the report (per thread, most sampled first)."""
        self._stop.set()
        self._thread.join()
        self._t1 = time.perf_counter()
        return self.report()

    def report(self) -> str:
        wall = (self._t1 or time.perf_counter()) - self._t0
        out = [f"stack samples every {1000 * self.period_s:g} ms over {wall:.1f} s"]
        for name, c in sorted(self.counts.items(), key=lambda kv: -kv[1].samples):
            out += ["", f"## thread {name}: {c.samples} samples", "",
                    "self (innermost frame: running, blocked in the C call it makes, or waiting for the GIL there):"]
            out += [f"  {100 * n / max(1, c.samples):5.1f}%  {key}"
                    for key, n in sorted(c.self_counts.items(), key=lambda kv: -kv[1])[:self.top]]
            out += ["", "total (on the stack):"]
            out += [f"  {100 * n / max(1, c.samples):5.1f}%  {key}"
                    for key, n in sorted(c.total_counts.items(), key=lambda kv: -kv[1])[:self.top]]
        return "\n".join(out)

    def _targets(self) -> dict[int, str]:
        if self.thread_id is not None:
            return {self.thread_id: "loop"}
        assert self.want is not None
        return {t.ident: t.name for t in threading.enumerate()
                if t.ident is not None and t is not self._thread and self.want(t.name)}

    def _run(self) -> None:
        targets, refreshed = self._targets(), time.perf_counter()
        while not self._stop.wait(self.period_s):
            if self.want is not None and time.perf_counter() - refreshed > 1.0:  # threads come and go
                targets, refreshed = self._targets(), time.perf_counter()
            frames = sys._current_frames()
            for ident, name in targets.items():
                frame = frames.get(ident)
                if frame is not None:
                    self._count(self.counts.setdefault(name, _Counts()), frame)

    @staticmethod
    def _count(c: _Counts, frame: FrameType) -> None:
        c.samples += 1
        code = frame.f_code
        leaf = f"{code.co_filename.rsplit('/', 2)[-1]}:{frame.f_lineno} {code.co_name}"
        c.self_counts[leaf] = c.self_counts.get(leaf, 0) + 1
        seen = set()
        f: FrameType | None = frame
        while f is not None:
            code = f.f_code
            key = f"{code.co_filename.rsplit('/', 2)[-1]} {code.co_name}"
            if key not in seen:
                seen.add(key)
                c.total_counts[key] = c.total_counts.get(key, 0) + 1
            f = f.f_back
