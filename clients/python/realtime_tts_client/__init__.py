"""realtime_tts_client: a client for the realtime_tts server that speaks only its documented wire protocol.

    from realtime_tts_client import Client, synthesize
    synthesize("Hello!", "127.0.0.1:8000", out="hello.wav")            # sync one-shot
    async with await Client().session(voice="auto") as s:              # session mode (PROTOCOL.md §2)
        ctx = s.context(); await ctx.speak("Hi there."); result = await ctx.collect()

Imports no server code (tests/clients/test_client_package.py checks it).
"""

from realtime_tts_client.audio import ENCODINGS, AudioFormat, to_s16, write_wav
from realtime_tts_client.client import DEFAULT_SERVER, Client, base_urls, synthesize
from realtime_tts_client.events import (
    Audio,
    ContextStarted,
    Done,
    Event,
    FlushDone,
    Pong,
    SegmentEnd,
    SegmentStart,
    ServerError,
    TTSServerError,
    Word,
    Words,
)
from realtime_tts_client.result import Result
from realtime_tts_client.session import Context, Session, SessionModeUnavailable
from realtime_tts_client.simple import SimpleStream

__all__ = [
    "DEFAULT_SERVER", "ENCODINGS", "Audio", "AudioFormat", "Client", "Context", "ContextStarted", "Done", "Event",
    "FlushDone", "Pong", "Result", "SegmentEnd", "SegmentStart", "ServerError", "Session", "SessionModeUnavailable",
    "SimpleStream", "TTSServerError", "Word", "Words", "base_urls", "synthesize", "to_s16", "write_wav",
]
