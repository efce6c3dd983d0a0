"""The web layer (Starlette): app (routes, AppState, create_app), http (speech responses, body parsing),
simple_ws (WebSocket simple mode), errors (the one mapping of errors to HTTP status and WS close codes).

Imports service, protocol, audio, metrics, engine.pool; never an engine's internals, never torch.
"""

from realtime_tts.api.app import create_app

__all__ = ["create_app"]
