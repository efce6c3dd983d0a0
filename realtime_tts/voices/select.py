"""A request's voice, resolved against the saved-voice library and the engine's presets: what mode it
really is, which prompt it clones, which design instruct and seed a preset means, and the warnings to report.

Called by Service.open for every entry point (HTTP, /v1/synth, both WebSockets, dialects), so every one
takes voice=<saved id | preset | auto/base | clone | design | custom>. Imports engine.base, errors, protocol
and this package; the store read is one small file on a cache miss.
"""

from __future__ import annotations

import dataclasses

from realtime_tts.engine.base import Engine, VoicePrompt
from realtime_tts.errors import BadRequest, NotFound, UnsupportedVoiceMode
from realtime_tts.protocol import DEFAULT_VOICES, Params
from realtime_tts.voices.presets import PRESETS
from realtime_tts.voices.store import VoiceStore, looks_like_id


def saved_voice_params(params: Params) -> Params:
    """voice=<saved id> means clone that voice (before routing: only an engine that clones may take it)."""
    if params.voice_mode == "auto" and params.preset is not None and looks_like_id(params.preset) \
            and params.voice_id is None:
        return dataclasses.replace(params, voice_mode="clone", voice_id=params.preset, preset=None)
    return params


def resolve(params: Params, engine: Engine, store: VoiceStore | None,
            prompt: VoicePrompt | None) -> tuple[Params, VoicePrompt | None, tuple[str, ...]]:
    """→ (params as the engine should see them, the clone prompt, warnings). Raises NotFound for an unknown
    saved voice and BadRequest naming "voice" for a preset the engine does not have."""
    caps = engine.capabilities
    warnings: tuple[str, ...] = ()
    if params.voice_mode == "clone" and prompt is None:
        if store is None or params.voice_id is None:
            raise NotFound(f"voice_id {params.voice_id!r} not found (no voice library configured)", field="voice_id")
        saved = store.get(params.voice_id)
        if saved.prompt.engine != caps.engine:
            raise BadRequest(f"voice_id {params.voice_id!r} was made by the {saved.prompt.engine!r} engine, not "
                             f"{caps.engine!r}", field="voice_id")
        prompt = dataclasses.replace(saved.prompt, key=saved.voice_id)  # the workers' prompt LRU key
        return params, prompt, warnings
    preset = (params.preset or "").lower() or None
    if params.voice_mode != "auto" or preset is None or preset in DEFAULT_VOICES:
        return params, prompt, warnings
    if "design" in caps.voice_modes and caps.continuity:
        # OmniVoice: a preset is a fixed design instruct + seed (a request seed still wins).
        known = PRESETS.get(preset)
        if known is None:
            raise BadRequest(f"voice {params.preset!r} is neither a saved voice nor a preset of the "
                             f"{caps.engine!r} engine; use auto, design (with instruct), clone (with voice_id), "
                             f"a saved voice_... id or one of {', '.join(PRESETS)}", field="voice")
        params = dataclasses.replace(params, voice_mode="design", instruct=known.instruct,
                                     seed=params.seed if params.seed is not None else known.seed)
        return params, prompt, warnings
    if "clone" not in caps.voice_modes and params.voice_mode == "clone":
        raise UnsupportedVoiceMode(f"voice mode clone is not supported by the {caps.engine!r} engine",
                                   field="voice")
    warn = getattr(engine, "preset_warning", None)  # engines with named voices that may be missing
    message = warn(preset) if warn is not None else None
    return params, prompt, (message,) if message else warnings
