"""OmniVoice inference written for batched serving (torch). Imported only by engine worker processes and
tests, never by the web process (which uses realtime_tts.omnivoice_text for validation)."""

from realtime_tts.model.checkpoint import build_random_checkpoint
from realtime_tts.model.codec import ClonePrompt, Codec, fade_edges, match_loudness
from realtime_tts.model.decoding import ItemState, PackedBatch, pack, run, score, step, step_packed, unpack
from realtime_tts.model.network import OmniVoiceModel
from realtime_tts.model.sequence import DecodeParams, PreparedItem, prepare, reveal_schedule

__all__ = [
    "ClonePrompt", "Codec", "DecodeParams", "ItemState", "OmniVoiceModel", "PackedBatch", "PreparedItem",
    "build_random_checkpoint", "fade_edges", "match_loudness", "pack", "prepare", "reveal_schedule", "run", "score",
    "step", "step_packed", "unpack",
]
