"""The speculative first unit (incremental text only).

While the turn's first unit is undecided and the text so far ends where it would end if the next word starts a
new sentence (SentenceBuffer.peek_first_unit), that unit's engine request starts at once, privately (not a
segment yet). The next text either confirms it (the buffer emits the same unit: the running request becomes
segment 0, Production.adopted) or contradicts it (abort; the real unit goes the normal way). If its audio
arrives before any more text, the turn is cut there (buffer flush) and the audio goes out: first audio never
waits for the next word, at the price of a sentence split in two when the text later turns out to go on
("that." ... "in five minutes"): still every word once, in order. A guess ending in a number ("3.") is the
exception: it waits for the next text (see confirms_by_audio).

Imports text, metrics and this package's planning and production; never torch.
"""

from __future__ import annotations

import asyncio

from realtime_tts.metrics import Metrics
from realtime_tts.service.planning import Plan, speakable
from realtime_tts.service.production import Production, Segment
from realtime_tts.text import Unit, number_may_go_on


class Speculation:
    """One turn's speculation: the running guess (`spec`), the aborted ones still to be awaited (`dropped`)."""

    def __init__(self, synth_id: str, production: Production, plan: Plan, metrics: Metrics):
        self._id = synth_id
        self._production = production
        self._plan = plan
        self._metrics = metrics
        self.first_unit_out = False  # the turn's first unit has been emitted (then nothing is speculated)
        self.spec: Segment | None = None  # running, private: its unit is not confirmed yet
        self.dropped: list[asyncio.Task[None]] = []  # aborted speculations, awaited on exit
        self._count = 0

    def unit_out(self, unit: Unit) -> None:
        """The buffer emitted a unit: the first one settles the speculation."""
        if not self.first_unit_out:
            self.first_unit_out = True
            self._settle(unit)

    def consider(self, candidate: Unit | None) -> None:
        """Text arrived without emitting the first unit; candidate is the unit it would be if a new sentence
        began next: start, keep or drop the speculative request."""
        spec = self.spec
        if spec is not None:
            if candidate == spec.unit:
                return  # e.g. trailing whitespace arrived: still undecided
            self.drop(miss=True)  # the text went on past it: that unit will never be emitted
        if candidate is None or not speakable(candidate.text):
            return
        self._count += 1
        # Its own request id: an aborted speculation may still be in an engine when the real segment 0 arrives.
        request = self._plan.request(0, candidate, request_id=f"{self._id}-0s{self._count}")
        self._plan.expect_first_audio()
        self.spec = self._production.launch(0, candidate, request, name=f"synth-{self._id}-spec{self._count}")
        self._metrics.speculations_total.inc()

    def _settle(self, first: Unit) -> None:
        """The buffer emitted the turn's first unit: adopt the speculation if it is that very unit, else drop it."""
        spec = self.spec
        if spec is None:
            return
        if spec.unit == first:
            self.spec, self._production.adopted = None, spec
            self._metrics.speculation_hits_total.inc()
        else:
            self.drop(miss=True)

    def drop(self, *, miss: bool) -> None:
        spec, self.spec = self.spec, None
        if spec is None:
            return
        if spec.task is not None:
            spec.task.cancel()  # Production._generate's finally aborts the engine request
            self.dropped.append(spec.task)
        if miss:
            self._metrics.speculation_misses_total.inc()

    def confirms_by_audio(self, seg: Segment) -> bool:
        """seg's first audio arrived: is it the running guess, to be cut at once (flush emits exactly that unit)
        so the audio goes out now instead of after the next word? Not after a number ("went up by 3."): "5" is
        as likely next as a new sentence, and speaking "3." alone cannot be taken back; that guess waits for the
        next text (its engine work is done early all the same)."""
        return seg is self.spec and not number_may_go_on(seg.unit.text)
