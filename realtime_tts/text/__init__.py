"""Text segmentation: the streaming sentence buffer and the whole-text chunker, multilingual and lossless.

Pure Python (regex, jieba); never imports the engine, torch or numpy.
"""

from realtime_tts.text.chunk import split_text, warm_up
from realtime_tts.text.punctuation import number_may_go_on
from realtime_tts.text.script import budget_length, text_length
from realtime_tts.text.stream import SentenceBuffer
from realtime_tts.text.unit import Unit, normalize_space

__all__ = ["SentenceBuffer", "Unit", "budget_length", "normalize_space", "number_may_go_on", "split_text",
           "text_length", "warm_up"]
