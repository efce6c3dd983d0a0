"""Segments conditioned on an earlier segment's generated audio (Submit.prompt_from): who waits for whom.

The worker loop tells the book about every segment that keeps its codes (Submit.keep_codes), parks the
segments that name one still generating, and hands them back, with the source's codes and text as their
prompt, once the decode thread has the codes (or unconditioned, on their own `prompt`, when the source
failed or was cancelled: its text is still spoken). Plain Python over ipc messages; no torch.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

import msgspec

from realtime_tts.engine import ipc
from realtime_tts.omnivoice_text import end_with_punctuation

log = logging.getLogger(__name__)

MAX_KEPT = 4096  # finished sources remembered for late dependents (a short first segment: ~1 KB of codes)
# The loudness stored with a generated prompt: at or above the clone rule's quiet threshold, so no gain is
# applied on its account (the worker peak-normalises generated-prompt output like auto/design audio).
GENERATED_RMS = 0.1


class PromptBook:
    def __init__(self, max_kept: int = MAX_KEPT) -> None:
        self._texts: dict[str, str] = {}  # keep_codes sources still generating: request_id → text
        self._parked: dict[str, list[ipc.Submit]] = {}  # source request_id → segments waiting for it
        self._kept: OrderedDict[str, ipc.Prompt] = OrderedDict()  # finished sources' prompts
        self._max_kept = max_kept

    def __len__(self) -> int:
        """Segments parked."""
        return sum(len(v) for v in self._parked.values())

    def take(self, submit: ipc.Submit) -> ipc.Submit | None:
        """A new Submit → the Submit to admit now (prompt resolved), or None when it is parked."""
        if submit.keep_codes:
            self._texts[submit.request_id] = submit.text
        source = submit.prompt_from
        if source is None:
            return submit
        kept = self._kept.get(source)
        if kept is not None:
            self._kept.move_to_end(source)
            return _on_prompt(submit, kept)
        if source in self._texts:
            self._parked.setdefault(source, []).append(submit)
            return None
        log.warning("segment %s names %s, which this worker does not have: it runs on its own prompt",
                    submit.request_id, source)
        return _on_prompt(submit, submit.prompt)

    def generated(self, request_id: str, codes: bytes, num_codebooks: int) -> list[ipc.Submit]:
        """The decode thread has a kept source's codes → the segments waiting for them, ready to admit."""
        text = self._texts.pop(request_id, None)
        if text is None:
            return []
        prompt = ipc.Prompt(ref_text=end_with_punctuation(text), codes=codes, num_codebooks=num_codebooks,
                            num_frames=len(codes) // (2 * num_codebooks), ref_rms=GENERATED_RMS,
                            key=f"gen:{request_id}", generated=True)
        self._kept[request_id] = prompt
        while len(self._kept) > self._max_kept:
            self._kept.popitem(last=False)
        return [_on_prompt(s, prompt) for s in self._parked.pop(request_id, [])]

    def gone(self, request_id: str) -> list[ipc.Submit]:
        """A source failed or was cancelled → its waiting segments, to run on their own prompt."""
        self._texts.pop(request_id, None)
        return [_on_prompt(s, s.prompt) for s in self._parked.pop(request_id, [])]

    def drop(self, request_id: str) -> bool:
        """Abort of a parked segment: forget it. True when it was parked here."""
        for source, waiting in self._parked.items():
            for i, s in enumerate(waiting):
                if s.request_id == request_id:
                    del waiting[i]
                    if not waiting:
                        del self._parked[source]
                    return True
        return False


def _on_prompt(submit: ipc.Submit, prompt: ipc.Prompt | None) -> ipc.Submit:
    # A generated prompt replaces the design instruct: the voice is in the prompt now.
    mode, instruct = ("clone", None) if prompt is not None and prompt.generated else (submit.mode, submit.instruct)
    return msgspec.structs.replace(submit, prompt=prompt, prompt_from=None, mode=mode, instruct=instruct)


class Generated(msgspec.Struct, frozen=True):
    """Decode thread → loop thread (through the inbox): a kept segment's codes exist."""

    request_id: str
    codes: bytes
    num_codebooks: int


class Gone(msgspec.Struct, frozen=True):
    """Any thread → loop thread: a segment failed (its dependents run on their own prompt)."""

    request_id: str
