"""Opt-in profile of the web process's event loop thread (`realtime-tts serve --profile-web PATH`): where the one
loop's time goes during a run, written at shutdown as the top functions and the loop thread's CPU share.

cProfile (stdlib) on the loop thread only: pipe reader threads, to_thread work and worker processes are not in
it (their CPU shows in the thread's share against the process's). clock "cpu" (default) times the thread's CPU
(where a saturated loop spends it); "wall" also counts the time the thread waited inside a call (e.g. for the GIL
while another thread of the process ran). Its hooks slow Python code down (roughly 1.5-2x on the loop): compare
runs with and without it before reading absolute rates. Imports only the stdlib.
"""

from __future__ import annotations

import cProfile
import io
import logging
import pstats
import time
from pathlib import Path

log = logging.getLogger(__name__)


class LoopProfile:
    """start() and stop() on the loop thread (the server's startup and shutdown); stop() writes PATH (a text
    report: the run's wall time, the loop thread's CPU seconds and the process's, then the top functions by own
    time and by cumulative time) and PATH.pstats (for pstats / snakeviz)."""

    def __init__(self, path: Path, top: int = 40, clock: str = "cpu"):
        if clock not in ("cpu", "wall"):
            raise ValueError(f"profile clock must be cpu or wall, got {clock!r}")
        self.path = path
        self.top = top
        self.clock = clock
        self._profile = cProfile.Profile(time.thread_time) if clock == "cpu" else cProfile.Profile()
        self._t0 = self._thread0 = self._process0 = 0.0
        self._running = False

    def start(self) -> None:
        self._t0, self._thread0, self._process0 = time.perf_counter(), time.thread_time(), time.process_time()
        self._profile.enable()
        self._running = True
        log.info("profiling the event loop thread into %s", self.path)

    def stop(self) -> None:
        if not self._running:
            return
        self._profile.disable()
        self._running = False
        wall = time.perf_counter() - self._t0
        thread_s, process_s = time.thread_time() - self._thread0, time.process_time() - self._process0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._profile.dump_stats(str(self.path) + ".pstats")
        out = io.StringIO()
        out.write(f"# event loop profile ({self.clock} clock): {wall:.1f} s wall, loop thread {thread_s:.2f} s CPU "
                  f"({100 * thread_s / max(wall, 1e-9):.0f}% of one core), web process {process_s:.2f} s CPU\n\n")
        stats = pstats.Stats(self._profile, stream=out)
        for key, title in (("tottime", "own time"), ("cumulative", "cumulative time")):
            out.write(f"## top {self.top} by {title}\n\n")
            stats.sort_stats(key).print_stats(self.top)
        self.path.write_text(out.getvalue())
        log.info("event loop profile written to %s", self.path)

