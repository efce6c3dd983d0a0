"""Prometheus metrics (PROTOCOL.md §6): one registry per process, the project's metric names, rendering.

Leaf module: prometheus-client only. Gauges that describe engines are read through callbacks at scrape
time (set by the pool), so scraping never waits on generation.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

PREFIX = "realtime_tts_"
CONTENT_TYPE = CONTENT_TYPE_LATEST

_LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0)
_DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
# Every count load-adaptive steps chooses between the usual floor (16) and default (32), so the share of
# segments at each count reads off the buckets exactly.
_STEP_BUCKETS = (1, 2, 4, 8, 12, *range(16, 33), 48, 64)
_RTF_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)


class Metrics:
    """All metric objects of one process. A fresh registry per instance keeps test servers independent."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        p = PREFIX
        self.pool_size = Gauge(p + "pool_size", "Engine slots (CPU threads / GPU workers).", ["engine"], registry=r)
        self.pool_idle = Gauge(p + "pool_idle", "Engine slots idle now.", ["engine"], registry=r)
        self.queue_depth = Gauge(p + "queue_depth", "Segments queued per worker.", ["worker"], registry=r)
        self.requests_total = Counter(p + "requests_total", "Finished requests.",
                                      ["endpoint", "voice_mode", "status"], registry=r)
        self.request_duration_seconds = Histogram(p + "request_duration_seconds", "Request wall time.",
                                                  ["endpoint"], buckets=_DURATION_BUCKETS, registry=r)
        self.ttfa_seconds = Histogram(p + "ttfa_seconds", "Time to first audio.", ["endpoint"],
                                      buckets=_LATENCY_BUCKETS, registry=r)
        self.rtf = Histogram(p + "rtf", "Real-time factor (wall time / audio time) per request.",
                             buckets=_RTF_BUCKETS, registry=r)
        self.audio_seconds_total = Counter(p + "audio_seconds_total", "Audio produced.", ["engine"], registry=r)
        self.input_chars_total = Counter(p + "input_chars_total", "Text characters received.", ["endpoint"],
                                         registry=r)
        self.batch_size = Histogram(p + "batch_size", "Engine batch size per segment.",
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128), registry=r)
        self.segment_steps = Histogram(p + "segment_steps", "Diffusion steps per segment (OmniVoice: fewer than "
                                       "num_step only when load-adaptive steps cut them).",
                                       buckets=_STEP_BUCKETS, registry=r)
        self.step_seconds = Histogram(p + "step_seconds", "Diffusion step time (OmniVoice engine).",
                                      buckets=_LATENCY_BUCKETS, registry=r)
        self.cuda_graph_hits_total = Counter(p + "cuda_graph_hits_total", "Steps run from a captured graph.",
                                             registry=r)
        self.cuda_graph_misses_total = Counter(p + "cuda_graph_misses_total", "Steps run eagerly.", registry=r)
        # GPU workers (cumulative worker figures, fed from their load reports): where a worker's time goes, and
        # what admission control refused. codec share of the card = rate(codec_seconds_total).
        self.worker_host_seconds_total = Counter(p + "worker_host_seconds_total", "Step loop host work, less its "
                                                 "waits for the GPU.", ["worker"], registry=r)
        self.gpu_busy_seconds_total = Counter(p + "gpu_busy_seconds_total", "GPU time running diffusion steps.",
                                              ["worker"], registry=r)
        self.gpu_gap_seconds_total = Counter(p + "gpu_gap_seconds_total", "GPU idle between back-to-back "
                                             "diffusion steps (waiting for the host).", ["worker"], registry=r)
        self.codec_seconds_total = Counter(p + "codec_seconds_total", "GPU time of codec decodes.", ["worker"],
                                           registry=r)
        # mean segments per codec call = rate(codec_items_total) / rate(codec_calls_total)
        self.codec_calls_total = Counter(p + "codec_calls_total", "Codec calls (graph replays and eager calls).",
                                         ["worker"], registry=r)
        self.codec_items_total = Counter(p + "codec_items_total", "Segments decoded by the codec.", ["worker"],
                                         registry=r)
        self.admission_refusals_total = Counter(p + "admission_refusals_total", "Requests or turns refused at "
                                                "once because they could not start in time on the worker "
                                                "(side: web = on arrival in the web process, from the worker's "
                                                "last report; worker = by the worker itself).",
                                                ["worker", "side"], registry=r)
        self.full_step_seconds = Gauge(p + "full_step_seconds", "A worker's measured step time at its token "
                                       "budget (its admission model).", ["worker"], registry=r)
        self.cancellations_total = Counter(p + "cancellations_total", "Cancelled requests by stage.", ["stage"],
                                           registry=r)
        self.speculations_total = Counter(
            p + "speculations_total", "First units of a turn started before the next word confirmed their end.",
            registry=r)
        self.speculation_hits_total = Counter(p + "speculation_hits_total",
                                              "Speculative first units that became segment 0.", registry=r)
        self.speculation_misses_total = Counter(
            p + "speculation_misses_total", "Speculative first units aborted because the text went on.", registry=r)
        self.errors_total = Counter(p + "errors_total", "Errors reported to clients by code.", ["code"], registry=r)
        self.ws_connections = Gauge(p + "ws_connections", "Open WebSocket connections.", registry=r)
        self.ws_closes_total = Counter(p + "ws_closes_total", "WebSocket closes by close code.", ["code"],
                                       registry=r)
        # reliability and security (issue 17): who is let in, which limit refused what, faults survived
        self.auth_failures_total = Counter(p + "auth_failures_total", "Requests refused for credentials.",
                                           ["reason"], registry=r)
        self.key_requests_total = Counter(p + "key_requests_total", "Requests and WebSocket connects let in, by "
                                          "API key name (anonymous without keys).", ["key"], registry=r)
        self.limit_refusals_total = Counter(p + "limit_refusals_total", "Requests, frames or connections refused "
                                            "or closed by a limit.", ["limit"], registry=r)
        self.connections = Gauge(p + "connections", "Open WebSockets plus HTTP requests in flight (limited).",
                                 registry=r)
        self.http_stream_aborts_total = Counter(p + "http_stream_aborts_total", "Streamed HTTP responses the "
                                                "client left before their end.", ["endpoint"], registry=r)
        self.active_requests = Gauge(p + "active_requests", "Requests being served, by engine (admission: "
                                     "refused over the engine's max_active_requests).", ["engine"], registry=r)
        self.worker_restarts_total = Counter(p + "worker_restarts_total", "Engine worker restarts by cause.",
                                             ["engine", "cause"], registry=r)

    def watch_pool(self, engine: str, size: Callable[[], float], idle: Callable[[], float],
                   queued: Callable[[], float] | None = None) -> None:
        """Pool gauges read at scrape time from the engine (cheap, lock-free reads). queued: the engine's queue
        as one queue_depth series labelled by engine (engines with workers report per-worker series)."""
        self.pool_size.labels(engine=engine).set_function(size)
        self.pool_idle.labels(engine=engine).set_function(idle)
        if queued is not None:
            self.queue_depth.labels(worker=engine).set_function(queued)

    def render(self) -> bytes:
        return generate_latest(self.registry)
