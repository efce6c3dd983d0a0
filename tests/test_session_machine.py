"""Issue 13 item 8: nothing received is silently lost. A hypothesis state machine drives one session-mode socket
on the real server (CPU voice) with random interleavings of text / flush / end / cancel (with and without
played_ms) / waits across up to 8 live contexts, reading whatever arrives between steps. session_client checks
every frame as it arrives (ids echoed; audio only for a live context's slot, in its current segment, with
contiguous sample offsets: contexts never mix audio; nothing after context.done). At the end every context is
ended and read to its context.done, and:
- ended contexts: the segment.start texts, in order, are exactly the text sent (every non-whitespace character
  once, offsets consecutive, text = normalized span);
- cancelled contexts: text_spoken = the text sent up to unspoken_start, the segments received cover it, and the
  rest is what context.done reports as unspoken;
- context.done is the last message of each context (checked as frames arrive).
Size: SETTINGS below: 30 examples x up to 30 steps; 20-45 s here (2 cores shared with other work).
"""

from __future__ import annotations

import time
import unicodedata
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from live_server import Server, start_server, stop_server
from session_client import Ctx, SessionClient

from realtime_tts.text import normalize_space

MAX_LIVE = 8
SETTINGS = settings(max_examples=30, stateful_step_count=30, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

LATIN_TEXT = [ch for ch in map(chr, range(0x20, 0x2100))
              if (unicodedata.category(ch)[0] in "LP" or unicodedata.category(ch) in ("Nd", "Zs"))
              and (not ch.isalpha() or unicodedata.name(ch, "").startswith("LATIN"))]

CHUNKS = st.one_of(
    st.sampled_from([" The train leaves at nine.", " Bring a warm coat, because it gets cold.", " Okay!",
                     " We will have breakfast in the dining car, then walk to the lake and back."]),
    st.sampled_from(["Hello", " there", ".", " How are", " you?", " I", "'m fine", ", thanks", "!", " ", "\n",
                     " Mr.", " Smith", " paid 3.5", " dollars", "…", " café", " 🙂", "  ", " and then", " we left.",
                     "Yes", " no", ";", " really", " it is", " 12:30", "?!", " ok"]),
    # not category No: the CPU voice's own text normalizer fails on "{❶" (int() of a circled digit): a bug of
    # the voice library, not of the session layer. Letters of the Latin script only: the CPU voice refuses text
    # with other scripts (a context error naming omnivoice, tests/test_engine_text_support.py), which says
    # nothing about losing text.
    st.text(alphabet=st.sampled_from(LATIN_TEXT), max_size=8),
)


class SessionMachine(RuleBasedStateMachine):
    url = ""

    def __init__(self) -> None:
        super().__init__()
        self.c = SessionClient(self.url, seed=1)
        self.count = 0
        self.current: dict[int, str] = {}  # lane -> its current context id
        self.state: dict[str, str] = {}  # context id -> "open" | "ended" | "cancelled"
        self.sent_at_cancel: dict[str, str] = {}

    def _pick(self, pick: int) -> int:
        """A lane that has a context, when there is one (else lane 0): rules act on contexts that exist."""
        lanes = sorted(self.current)
        return lanes[pick % len(lanes)] if lanes else 0

    def _not_done(self) -> int:
        return sum(1 for cid in self.state if self.c.contexts.get(cid) is None or self.c.contexts[cid].done is None)

    def _lane(self, lane: int, *, new_ok: bool) -> str | None:
        """The lane's open context; a new one when it has none (and the live limit allows)."""
        cid = self.current.get(lane)
        if cid is not None and self.state[cid] == "open":
            return cid
        if not new_ok or self._not_done() >= MAX_LIVE:
            return None
        self.count += 1
        cid = f"k{lane}.{self.count}"
        self.current[lane] = cid
        self.state[cid] = "open"
        return cid

    @initialize(chunk=CHUNKS)
    def first_text(self, chunk: str) -> None:
        self.text(0, chunk)

    @rule(lane=st.integers(0, MAX_LIVE - 1), chunk=CHUNKS)
    def text(self, lane: int, chunk: str) -> None:
        cid = self._lane(lane, new_ok=True)
        if cid is not None:
            self.c.send({"type": "text", "context_id": cid, "text": chunk})
        self.c.pump()

    def _to_open(self, pick: int, kind: str) -> str | None:
        """Send {"type": kind} to an open context (if a lane has one); returns its id."""
        cid = self._lane(self._pick(pick), new_ok=False)
        if cid is not None:
            self.c.send({"type": kind, "context_id": cid})
        self.c.pump()
        return cid

    @precondition(lambda self: bool(self.current))
    @rule(pick=st.integers(0, MAX_LIVE - 1))
    def flush(self, pick: int) -> None:
        self._to_open(pick, "flush")

    @precondition(lambda self: bool(self.current))
    @rule(pick=st.integers(0, MAX_LIVE - 1))
    def end(self, pick: int) -> None:
        cid = self._to_open(pick, "end")
        if cid is not None:
            self.state[cid] = "ended"

    @rule(pick=st.integers(0, MAX_LIVE - 1), played=st.none() | st.integers(0, 6000), any_state=st.booleans())
    def cancel(self, pick: int, played: int | None, any_state: bool) -> None:
        cid = self.current.get(self._pick(pick))
        # an open context, or (any_state) one that was ended or cancelled already: a cancel racing the end
        if cid is not None and (self.state[cid] == "open" or any_state):
            msg: dict[str, object] = {"type": "cancel", "context_id": cid}
            if played is not None:
                msg["played_ms"] = played
            self.c.send(msg)
            if self.state[cid] != "cancelled":
                self.sent_at_cancel.setdefault(cid, self.c.contexts[cid].sent_text if cid in self.c.contexts else "")
                self.state[cid] = "cancelled"
        self.c.pump()

    @rule(seconds=st.sampled_from([0.05, 0.2, 0.5]))
    def wait(self, seconds: float) -> None:
        self.c.pump(seconds)

    @precondition(lambda self: bool(self.current))
    @rule(pick=st.integers(0, MAX_LIVE - 1), played=st.none() | st.integers(0, 6000))
    def barge_in(self, pick: int, played: int | None) -> None:
        """A sentence, flushed, then a cancel once its audio is out (the listener heard part of the context)."""
        cid = self._to_open(pick, "flush")
        if cid is None:
            return
        self.c.send({"type": "text", "context_id": cid, "text": " Please wait here."})
        self.c.send({"type": "flush", "context_id": cid})
        ctx = self.c.contexts[cid]
        ended = len(ctx.ended_segments)
        deadline = time.monotonic() + 2.0
        while ctx.done is None and len(ctx.ended_segments) == ended and time.monotonic() < deadline:
            self.c.pump(0.05)
        self.cancel(pick, played, any_state=False)

    @precondition(lambda self: bool(self.current))
    @rule(pick=st.integers(0, MAX_LIVE - 1))
    def wait_for_audio(self, pick: int) -> None:
        """Read until a context has some audio (then a cancel hears part of it)."""
        cid = self.current.get(self._pick(pick))
        ctx = self.c.contexts.get(cid) if cid is not None else None
        if ctx is None or self.state[cid] == "cancelled" or len(ctx.ended_segments) == len(ctx.segments):
            return  # nothing is being spoken: without more text (or flush/end) no audio comes
        deadline = time.monotonic() + 1.0
        while ctx.done is None and not ctx.ended_segments and time.monotonic() < deadline:
            self.c.pump(0.05)

    @invariant()
    def no_protocol_error(self) -> None:
        errors = [m for m in self.c.other if m.get("type") == "error"]
        assert not errors, errors

    def teardown(self) -> None:
        try:
            for cid, st_ in self.state.items():
                if st_ == "open":
                    self.c.send({"type": "end", "context_id": cid})
            for cid in self.state:
                if cid in self.c.contexts or self.state[cid] != "cancelled":
                    self.c.until_done(cid, timeout=60)
            for cid, st_ in self.state.items():
                ctx = self.c.contexts.get(cid)
                if ctx is None:  # cancelled before any text: only its already_done / cancelled answer
                    continue
                _check_context(ctx, st_)
                spoken = "some" if ctx.done.get("unspoken_start") else "none"
                event(f"context.done {ctx.done['reason']}" + (f", heard {spoken}" if ctx.done["reason"] == "cancelled"
                                                              else ""))
        finally:
            self.c.close()


def _check_context(ctx: Ctx, state: str) -> None:
    raw = ctx.sent_text
    done = ctx.done
    assert done is not None, ctx.id
    pos = 0
    for seg in ctx.segments:
        assert raw[pos:seg["text_start"]].strip() == "", (ctx.id, raw, seg)  # nothing skipped
        assert seg["text"] == normalize_space(raw[seg["text_start"]:seg["text_end"]]), (ctx.id, seg)
        pos = seg["text_end"]
    if done["reason"] in ("end", "idle"):  # idle: no end came for context_idle_s (20 s); its text is spoken
        assert raw[pos:].strip() == "", f"{ctx.id}: text never spoken: {raw[pos:]!r} of {raw!r}"
        assert len(ctx.ended_segments) == len(ctx.segments)
        assert done["stats"]["audio_duration_ms"] == pytest.approx(ctx.samples / 24, abs=0.05)
    else:
        assert done["reason"] == "cancelled" and state == "cancelled", (ctx.id, done, state)
        k = done["unspoken_start"]
        assert done["text_spoken"] == raw[:k], (ctx.id, done, raw)
        assert pos >= k, f"{ctx.id}: reported spoken beyond the segments received"
        assert ctx.samples == round(done["audio_sent_ms"] * 24), (ctx.id, ctx.samples, done)


@pytest.fixture(scope="module")
def machine_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server of its own: the suite's shared server has just taken the fuzzers' hostile inputs (worker
    restarts, refusals still counted against it), which would turn this test's contexts into error ends that
    say nothing about losing text. In the full CI run of session 7 that made this test fail on a shared
    server it passes on alone."""
    srv = start_server(tmp_path_factory.mktemp("machine"))
    yield srv
    stop_server(srv)
    assert "Traceback" not in srv.log(), srv.log()


def test_random_interleavings_lose_nothing(machine_server: Server) -> None:
    SessionMachine.url = f"{machine_server.ws}/v1/stream/text"
    run_state_machine_as_test(SessionMachine, settings=SETTINGS)
