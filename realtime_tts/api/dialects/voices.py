"""A vendor dialect's voice id → this server's voice field, the same rule for every dialect.

A stock plugin sends its vendor's voice ids (Cartesia uuids, ElevenLabs ids, Deepgram model names). Our own
names work as they are: the default names (auto/base/default), OpenAI's 13 names, every engine's presets, and
saved voice ids (voice_<hex>; the service resolves them and answers not found for an unknown one). Any other
id is spoken in the server's default voice with a warning, or refused naming the available voices when the
server runs with unknown_vendor_voice=error. Imports config, engine.pool, errors and protocol only.
"""

from __future__ import annotations

import logging

from realtime_tts.config import Config
from realtime_tts.engine.pool import EnginePool
from realtime_tts.errors import BadRequest
from realtime_tts.protocol import DEFAULT_VOICES, OPENAI_VOICES

log = logging.getLogger(__name__)

SAVED_PREFIX = "voice_"  # saved voice ids (POST /v1/voices) start with it


def known_voices(pool: EnginePool) -> list[str]:
    """The voice names this server speaks by name (saved voice ids aside), sorted."""
    names = {*DEFAULT_VOICES, *OPENAI_VOICES}
    for engine in pool.engines.values():
        names.update(p.lower() for p in engine.capabilities.presets)
    return sorted(names)


def vendor_voice(vendor_id: str | None, config: Config, pool: EnginePool, *,
                 field: str = "voice") -> tuple[str, tuple[str, ...]]:
    """→ (the voice field to use, warnings). Raises BadRequest naming `field` for an unknown id when the
    server is configured to refuse them."""
    if vendor_id is None or not vendor_id.strip():
        return "auto", ()
    name = vendor_id.strip()
    if name.startswith(SAVED_PREFIX) or name.lower() in known_voices(pool):
        return name, ()
    available = ", ".join(known_voices(pool))
    if config.dialects.unknown_vendor_voice == "error":
        raise BadRequest(f"{field} {name!r} is not a voice of this server; use a saved voice_... id or one of "
                         f"{available}", field=field)
    log.info("unknown vendor voice %r: speaking in the default voice", name)
    warning = (f"{field} {name!r} is not a voice of this server: spoken in the default voice (available: a "
               f"saved voice_... id or {available})")
    return "auto", (warning,)
