"""EnginePool: the engines of this process by name, routing a request to one, health and load aggregation.

The CPU voice is always present; the OmniVoice engine (engine/client.py) is imported and built only when
config.omnivoice.model is set, so the CPU-only path never imports it (nor torch).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from realtime_tts.config import Config
from realtime_tts.engine.base import Engine
from realtime_tts.engine.cpu import CpuEngine
from realtime_tts.errors import BadRequest, UnsupportedVoiceMode

log = logging.getLogger(__name__)

# Model names that mean "the server's default engine" (OpenAI SDKs always send one of these).
DEFAULT_MODEL_NAMES = ("", "auto", "default", "tts-1", "tts-1-hd", "gpt-4o-mini-tts")
_ALIASES = {"cpu": "cpu", "hibari": "cpu", "hibari-heart": "cpu", "omnivoice": "omnivoice"}
_STATUS_ORDER = {"ok": 0, "loading": 1, "error": 2}


class EnginePool:
    def __init__(self, config: Config):
        self.engines: dict[str, Engine] = {"cpu": CpuEngine(config)}
        if config.omnivoice.model:
            from realtime_tts.engine.client import OmniVoiceEngine  # type: ignore[import-not-found,unused-ignore]

            self.engines["omnivoice"] = OmniVoiceEngine(config)
        self.default = "omnivoice" if "omnivoice" in self.engines else "cpu"
        self._start_errors: dict[str, str] = {}
        self._starting: dict[str, asyncio.Task[None]] = {}

    async def start(self) -> None:
        """Start the CPU voice (must succeed: the server always speaks) and the other engines in the
        background: model loading can take minutes, /health says "loading" meanwhile, and a failure is
        reported there (status error) while the CPU voice keeps serving."""
        await self.engines["cpu"].start()
        for name, engine in self.engines.items():
            if name != "cpu":
                self._starting[name] = asyncio.create_task(self._start_one(name, engine), name=f"start-{name}")

    async def _start_one(self, name: str, engine: Engine) -> None:
        try:
            await engine.start()
        except Exception as e:  # reported by /health; the CPU voice keeps serving
            self._start_errors[name] = f"{type(e).__name__}: {e}"
            log.exception("engine %s failed to start", name)

    async def wait_started(self) -> None:
        """Wait for the background starts (tests and benchmarks that need every engine)."""
        await asyncio.gather(*self._starting.values(), return_exceptions=True)

    async def stop(self) -> None:
        for task in self._starting.values():
            task.cancel()
        await asyncio.gather(*self._starting.values(), return_exceptions=True)
        await asyncio.gather(*(e.stop() for e in self.engines.values()), return_exceptions=True)

    def route(self, model: str | None, voice_mode: str) -> Engine:
        """The engine for a request's model field and voice mode (errors name the field)."""
        name = (model or "").strip()
        key = name.lower()
        if key in DEFAULT_MODEL_NAMES:
            engine = self.engines[self.default]
            if voice_mode in engine.capabilities.voice_modes:
                return engine
            for other in self.engines.values():
                if voice_mode in other.capabilities.voice_modes:
                    return other
            raise UnsupportedVoiceMode(
                f"voice mode {voice_mode!r} is not supported by the {engine.capabilities.engine!r} engine; it needs "
                f"the 'omnivoice' engine (start the server with --model DIR)", field="voice")
        target = _ALIASES.get(key) or next(
            (n for n, e in self.engines.items() if e.capabilities.model.lower() == key), None)
        if target is None or target not in self.engines:
            known = sorted({*self.engines, *(e.capabilities.model for e in self.engines.values())})
            hint = " (the omnivoice engine is not configured: start with --model DIR)" if target == "omnivoice" else ""
            raise BadRequest(f"model {name!r} is not available{hint}; available: {', '.join(known)}", field="model")
        engine = self.engines[target]
        if voice_mode not in engine.capabilities.voice_modes:
            raise UnsupportedVoiceMode(
                f"voice mode {voice_mode!r} is not supported by the {target!r} engine; it needs the 'omnivoice' "
                f"engine", field="voice")
        return engine

    def health(self) -> dict[str, Any]:
        engines: dict[str, Any] = {}
        worst = "ok"
        for name, engine in self.engines.items():
            h = engine.health()
            status = "error" if name in self._start_errors else h.status
            worst = max(worst, status, key=lambda s: _STATUS_ORDER.get(s, 2))
            load = engine.load()
            engines[name] = {
                "status": status,
                "detail": self._start_errors.get(name, h.detail),
                "model": engine.capabilities.model,
                "device": engine.capabilities.device,
                "pool_size": load.pool_size,
                "idle": load.idle,
                "queued_segments": load.queued_segments,
                "in_flight_segments": load.in_flight_segments,
                "workers": [{"worker_id": w.worker_id, "status": w.status, "device": w.device,
                             "in_flight": w.in_flight, "restarts": w.restarts, "detail": w.detail}
                            for w in h.workers],
            }
        return {"status": worst, "default_engine": self.default, "engines": engines}

    def models(self) -> list[dict[str, Any]]:
        out = []
        for name, engine in self.engines.items():
            caps = engine.capabilities
            status = "error" if name in self._start_errors else engine.health().status
            out.append({
                "id": caps.model,
                "object": "model",
                "owned_by": "realtime_tts",
                "engine": caps.engine,
                "default": name == self.default,
                "installed": True,
                "loaded": status == "ok",
                "capabilities": {
                    "voice_modes": sorted(caps.voice_modes),
                    "languages": list(caps.languages) if caps.languages is not None else "many",
                    "sample_rates": [caps.sample_rate],
                    "presets": list(caps.presets),
                    "deterministic": caps.deterministic,
                    "device": caps.device,
                    # One voice per conversation (docs/protocol.md): OmniVoice conditions later segments on the
                    # first one's audio; an engine of named voices keeps one voice without that.
                    "voice_continuity": "first segment as prompt" if caps.continuity else "named voices",
                },
            })
        return out
