"""Vendor WebSocket dialects: the stock Cartesia, ElevenLabs and Deepgram plugins of pipecat and LiveKit Agents
speak to this server by changing a URL (docs/frameworks.md, ../docs/DIALECTS.md). Each dialect is a thin
translation onto the session core (service/session.py); connection.py holds what they share.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket

from realtime_tts.api.dialects.cartesia import CartesiaSocket
from realtime_tts.api.dialects.deepgram import DeepgramSocket
from realtime_tts.api.dialects.elevenlabs import ElevenLabsSocket

if TYPE_CHECKING:
    from realtime_tts.api.app import AppState

PATHS = ("WS /tts/websocket", "WS /v1/text-to-speech/{voice_id}/multi-stream-input",
         "WS /v1/text-to-speech/{voice_id}/stream-input", "WS /v1/speak")


def routes(state: AppState) -> list[WebSocketRoute]:
    async def cartesia(ws: WebSocket) -> None:
        await CartesiaSocket(ws, state).run()

    async def elevenlabs_multi(ws: WebSocket) -> None:
        await ElevenLabsSocket(ws, state, voice_id=ws.path_params["voice_id"], query=dict(ws.query_params),
                               multi=True).run()

    async def elevenlabs_single(ws: WebSocket) -> None:
        await ElevenLabsSocket(ws, state, voice_id=ws.path_params["voice_id"], query=dict(ws.query_params),
                               multi=False).run()

    async def deepgram(ws: WebSocket) -> None:
        await DeepgramSocket(ws, state, query=dict(ws.query_params)).run()

    return [
        WebSocketRoute("/tts/websocket", cartesia),
        WebSocketRoute("/v1/text-to-speech/{voice_id}/multi-stream-input", elevenlabs_multi),
        WebSocketRoute("/v1/text-to-speech/{voice_id}/stream-input", elevenlabs_single),
        WebSocketRoute("/v1/speak", deepgram),
    ]
