"""Service layer: turns a request or a WS text stream into segments, drives an engine, paces and frames the
audio, builds the stats envelope, records metrics and owns cancellation.

One owner per concern:
  service.py     Service: opens a Synthesis per request (validation against the engine), records metrics
  synthesis.py   Synthesis: one response, text in → events out; ties the parts below together, cancellation
  planning.py    text → units, duration shares, audio estimates, playback deadlines, SegmentRequests
  speculation.py the speculative first unit of incremental text
  production.py  segments against the engine: lookahead, one task per engine request, abort
  output.py      pacing and framing into AudioFrames, the ordered event loop
  stats.py       the per-response counters, the stats envelope, RSS readers
  events.py      SegmentStarted / AudioFrame / SegmentEnded
Imports point one way: synthesis → parts; the parts never import synthesis or service. Never torch, never
Starlette. This module re-exports what callers import.
"""

from realtime_tts.service.events import AudioFrame, Event, SegmentEnded, SegmentStarted
from realtime_tts.service.planning import FIRST_AUDIO_S, estimate_audio_s, playback_deadline, speakable
from realtime_tts.service.production import LOOKAHEAD
from realtime_tts.service.service import Service
from realtime_tts.service.stats import peak_rss_bytes, rss_bytes
from realtime_tts.service.synthesis import Synthesis

__all__ = ["FIRST_AUDIO_S", "LOOKAHEAD", "AudioFrame", "Event", "SegmentEnded", "SegmentStarted", "Service",
           "Synthesis", "estimate_audio_s", "peak_rss_bytes", "playback_deadline", "rss_bytes", "speakable"]
