"""Service: builds a Synthesis for each request the API layer opens (validated against its engine) and keeps
the request metrics (recorded once per Synthesis). Imports the engine pool, metrics, protocol and
service.synthesis; never torch, never Starlette.
"""

from __future__ import annotations

import numpy as np

from realtime_tts.config import Config
from realtime_tts.engine.base import Engine, VoicePrompt
from realtime_tts.engine.pool import EnginePool
from realtime_tts.errors import Overloaded
from realtime_tts.metrics import Metrics
from realtime_tts.protocol import Params, SpeechRequest
from realtime_tts.service.continuity import VoiceThread
from realtime_tts.service.synthesis import Synthesis
from realtime_tts.text import Unit
from realtime_tts.voices import select
from realtime_tts.voices.store import VoiceStore


class Service:
    """Builds Synthesis objects for the API layer and keeps the request metrics."""

    def __init__(self, config: Config, pool: EnginePool, metrics: Metrics, voices: VoiceStore | None = None):
        self.config = config
        self.pool = pool
        self.metrics = metrics
        self.voices = voices  # the saved-voice library (voice=<id>, voice_id)
        self._active: dict[str, int] = {}  # open Synthesis objects per engine (admission: max_active_requests)
        for name, engine in pool.engines.items():
            metrics.active_requests.labels(engine=name).set_function(
                lambda e=engine: float(self._active.get(e.capabilities.engine, 0)))  # type: ignore[misc]
            # Engines with worker processes feed their own series (per-worker queue depth, step times, CUDA
            # graph hits/misses) from worker reports; the others get one queue_depth series here.
            attach = getattr(engine, "attach_metrics", None)
            if attach is not None:
                attach(metrics)
            metrics.watch_pool(name, (lambda e=engine: float(e.load().pool_size)),  # type: ignore[misc]
                               (lambda e=engine: float(e.load().idle)),  # type: ignore[misc]
                               None if attach is not None else
                               (lambda e=engine: float(e.load().queued_segments)))  # type: ignore[misc]

    def engine_for(self, params: Params) -> Engine:
        return self.pool.route(params.model, params.voice_mode)

    def open(self, request: SpeechRequest, *, endpoint: str, incremental: bool = False, streaming: bool = True,
             prompt: VoicePrompt | None = None, engine: Engine | None = None,
             voice_thread: VoiceThread | None = None) -> Synthesis:
        """Validate a request against its engine and start a Synthesis (nothing is generated until the
        caller iterates events()). Raises errors.TTSError before any audio for every refusal.

        voice_thread: the conversation this response belongs to (one per socket or session: its voice carries
        over to every later response, service/continuity.py); None = a conversation of its own."""
        params = select.saved_voice_params(request.params)
        engine = engine or self.engine_for(params)
        # params.sample_rate is the wire rate: the api layer resamples (audio_out), the engine rate stays.
        params, prompt, warnings = select.resolve(params, engine, self.voices, prompt)
        synth = Synthesis(self, engine, params, endpoint=endpoint, incremental=incremental, streaming=streaming,
                          prompt=prompt, voice_thread=voice_thread)
        synth.warnings = warnings
        check = getattr(engine, "check", None)
        if check is not None:  # engines may refuse a request before any work is queued
            check(synth.segment_request(0, Unit(text=request.text or ".", start=0, end=0, first=True)))
        self._admit(engine)
        ignored = getattr(engine, "ignored_params", ())
        synth.warnings = (*synth.warnings, *(f"{name} is ignored by the {engine.capabilities.engine!r} engine"
                                             for name in ignored if getattr(params, name, None) is not None))
        return synth

    def _admit(self, engine: Engine) -> None:
        """Refuse a request at once (503 / 1013, retryable) when its engine already serves its limit of requests,
        instead of letting every request queue behind the others (engines say their limit in
        max_active_requests; none: no limit here, the engine's own queue limit still applies)."""
        name = engine.capabilities.engine
        limit = getattr(engine, "max_active_requests", 0)
        active = self._active.get(name, 0)
        if limit and active >= limit:
            raise Overloaded(f"the {name!r} engine is serving {active} requests, as many as it takes; retry shortly",
                             retry_after_ms=1000, limit=f"{name}_active_requests")
        self._active[name] = active + 1

    async def encode_voice(self, engine: Engine, audio: np.ndarray, sample_rate: int, ref_text: str) -> VoicePrompt:
        return await engine.encode_voice(audio, sample_rate, ref_text)

    def wants_events(self, synth: Synthesis) -> bool:
        return synth.params.events

    def record(self, synth: Synthesis, *, disconnected: bool = False) -> None:
        """Metrics for one finished Synthesis (called once, from its __aexit__)."""
        if synth._recorded:
            return
        synth._recorded = True
        name = synth.engine_name
        self._active[name] = max(0, self._active.get(name, 0) - 1)
        m = self.metrics
        if synth.error is not None:
            status = synth.error.code  # errors_total is counted where the error is reported (api)
        elif synth.cancelled:
            status = "cancelled"
            m.cancellations_total.labels(stage=synth.cancel_stage or "client").inc()
        elif disconnected:
            status = "disconnected"
            m.cancellations_total.labels(stage="disconnect").inc()
        else:
            status = "ok"
        m.requests_total.labels(endpoint=synth.endpoint, voice_mode=synth.params.voice_mode, status=status).inc()
        st = synth.stats()
        m.request_duration_seconds.labels(endpoint=synth.endpoint).observe(st["t_total_ms"] / 1e3)
        m.input_chars_total.labels(endpoint=synth.endpoint).inc(synth.num_chars)
        if st["ttfa_ms"] is not None:
            m.ttfa_seconds.labels(endpoint=synth.endpoint).observe(st["ttfa_ms"] / 1e3)
        if status == "ok" and st["rtf"] is not None:
            m.rtf.observe(st["rtf"])
        m.audio_seconds_total.labels(engine=st["engine"]).inc(st["audio_duration_ms"] / 1e3)
        for b in synth.batch_sizes:
            m.batch_size.observe(b)
        for n in synth.num_steps:
            m.segment_steps.observe(n)
