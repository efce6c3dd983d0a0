"""One voice per conversation, and chunk_mode on long texts: which segment is conditioned on which.

On engines that sample a fresh voice per generation in "auto" and "design" mode (capabilities.continuity:
OmniVoice), the first segment generated for a conversation keeps its codes (SegmentRequest.keep_codes) and
every later segment of that context, and of later contexts sharing the VoiceThread (a socket or session),
is conditioned on them: while they are being generated it names that segment (prompt_from: the worker holds
it until the codes exist, then starts it at once), afterwards it carries them as its prompt. chunk_mode
"sequential" conditions each segment on the one before it instead (clone voices too); "concurrent" and
"none" condition everything on the first. A clone voice stays its own prompt in concurrent mode. A request
naming another voice starts a new thread of its own. The thread's prompt is capped in length: every later
segment carries it in every step, so a 6 s first sentence costs 150 frames of tokens on each of them. While the
prompt lasts outside [prompt_max_s / 2, prompt_max_s], later segments (conditioned on it: the same voice) keep
their codes too, and the first of them whose audio falls inside becomes the prompt from then on.
Plain bookkeeping: imports engine.base and protocol.
"""

from __future__ import annotations

import dataclasses
from collections import deque

from realtime_tts.engine.base import SegmentRequest, Voice, VoicePrompt
from realtime_tts.protocol import Params

_HISTORY = 256  # recent (segment, the segment it was conditioned on) pairs, for logs and tests
FRAMES_PER_S = 25  # OmniVoice's codec, the one engine with continuity: a prompt's num_frames per second


def voice_signature(params: Params) -> tuple[str | None, ...]:
    """What names a voice in a request: a different one in a later context means "another voice"."""
    return (params.voice_mode, (params.preset or "").lower() or None, params.instruct, params.voice_id)


class VoiceThread:
    """The voice of one conversation (a WS connection, a session; one HTTP request otherwise). The API layer
    keeps one per socket/session and passes it to every Service.open of that socket."""

    def __init__(self) -> None:
        self.signature: tuple[str | None, ...] | None = None
        self.prompt: VoicePrompt | None = None  # the conversation's voice, once its first segment is generated
        self.source: str | None = None  # request_id of the segment being generated to become it
        self.source_owner: str | None = None  # the synthesis that segment belongs to
        self.settled = False  # the prompt's length is within the cap's window: no later segment replaces it
        self.history: deque[tuple[str, str]] = deque(maxlen=_HISTORY)

    def adopt(self, signature: tuple[str | None, ...]) -> None:
        """A context with this voice opens: another voice than before starts over."""
        if signature != self.signature:
            self.signature, self.prompt, self.source, self.source_owner = signature, None, None, None
            self.settled = False


class Continuity:
    """One synthesis's side of a VoiceThread: shapes each SegmentRequest it plans and learns from the codes
    that come back."""

    def __init__(self, synth_id: str, thread: VoiceThread, voice: Voice, *, chunk_mode: str,
                 prompt_max_s: float = 0.0):
        """prompt_max_s: the cap on the thread's prompt (0: the first segment's codes, whatever their length)."""
        self._id = synth_id
        self._thread = thread
        self._window = (prompt_max_s * FRAMES_PER_S / 2, prompt_max_s * FRAMES_PER_S) if prompt_max_s > 0 else None
        self._candidates: set[str] = set()  # conditioned segments asked for their codes (a shorter prompt)
        self._sequential = chunk_mode == "sequential"
        self._threaded = voice.mode in ("auto", "design") and voice.prompt is None
        self._previous: str | None = None  # sequential: the request_id of the segment before
        self._learned: dict[str, VoicePrompt] = {}  # sequential: codes of this synthesis's segments
        self._before: dict[str, str | None] = {}  # sequential: the segment each one was chained on

    def shape(self, index: int, request: SegmentRequest) -> SegmentRequest:
        if self._sequential:
            return self._chain(index, request)
        if not self._threaded:
            return request
        return self._on_thread(index, request)

    def _on_thread(self, index: int, request: SegmentRequest) -> SegmentRequest:
        t = self._thread
        if t.prompt is not None:
            return self._candidate(self._conditioned(request, prompt=t.prompt, source=t.prompt.key or ""))
        own_source = t.source is not None and t.source_owner == self._id
        if t.source is None or (index == 0 and own_source and t.source != request.request_id):
            # The conversation's first segment (or a new first guess of this synthesis, its earlier one dropped):
            # it keeps its codes, kept short by the first-clause cut.
            t.source, t.source_owner = request.request_id, self._id
            return dataclasses.replace(request, keep_codes=True)
        if t.source == request.request_id:
            return dataclasses.replace(request, keep_codes=True)
        return self._candidate(self._conditioned(request, source=t.source))

    def _candidate(self, request: SegmentRequest) -> SegmentRequest:
        """A conditioned segment keeps its codes while the thread's prompt may still be replaced by a shorter
        (or longer, when it is too short to carry a voice) one of the same voice."""
        if self._window is None or self._thread.settled:
            return request
        self._candidates.add(request.request_id)
        return dataclasses.replace(request, keep_codes=True)

    def _fits(self, prompt: VoicePrompt) -> bool:
        return self._window is None or self._window[0] <= prompt.num_frames <= self._window[1]

    def _chain(self, index: int, request: SegmentRequest) -> SegmentRequest:
        """sequential: each segment on the one before; the first on the thread's voice when there is one."""
        previous, self._previous = self._previous, request.request_id
        self._before[request.request_id] = previous
        request = dataclasses.replace(request, keep_codes=True)
        if previous is None or index == 0:
            if self._threaded and self._thread.prompt is not None:
                return self._conditioned(request, prompt=self._thread.prompt, source=self._thread.prompt.key or "")
            if self._threaded and self._thread.source is None:
                self._thread.source, self._thread.source_owner = request.request_id, self._id
            return request
        learned = self._learned.get(previous)
        for older in [r for r in self._learned if r != previous]:  # a long text keeps only the last codes
            del self._learned[older]
        if learned is not None:
            return self._conditioned(request, prompt=learned, source=previous)
        return self._conditioned(request, source=previous)

    def _conditioned(self, request: SegmentRequest, *, source: str, prompt: VoicePrompt | None = None
                     ) -> SegmentRequest:
        self._thread.history.append((request.request_id, source))
        # The voice is in the prompt now: a design instruct no longer applies (the worker drops it the same way
        # for a prompt_from segment). A clone voice's own prompt is the fallback should the source fail.
        if prompt is not None:
            voice = Voice(mode="clone", prompt=prompt)
            return dataclasses.replace(request, voice=voice)
        return dataclasses.replace(request, prompt_from=source)

    def learn(self, request_id: str, prompt: VoicePrompt) -> None:
        """A segment's generated codes came back."""
        if self._sequential:
            self._learned[request_id] = prompt
        t = self._thread
        if t.source == request_id and t.prompt is None:
            t.prompt, t.source, t.source_owner = prompt, None, None
            t.settled = self._fits(prompt)
        elif request_id in self._candidates and t.prompt is not None and not t.settled and self._fits(prompt):
            t.prompt, t.settled = prompt, True
        self._candidates.discard(request_id)

    def finished(self, request_id: str) -> None:
        """A segment's request ended (done, failed or aborted): a source that never delivered frees the role."""
        t = self._thread
        self._candidates.discard(request_id)
        if t.source == request_id:
            t.source, t.source_owner = None, None
        if self._sequential:
            if self._previous == request_id and request_id not in self._learned:
                # it gave no codes (never sent: punctuation only; or failed): the next one chains on the one before
                self._previous = self._before.get(request_id)
            elif self._previous != request_id:  # the next segment may still need the last one's codes
                self._learned.pop(request_id, None)
            self._before.pop(request_id, None)
