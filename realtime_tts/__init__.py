"""realtime_tts: a WebSocket-first realtime text-to-speech server for LLM voice agents."""

__version__ = "0.1.0"
