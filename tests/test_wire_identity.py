"""The wire bytes of fixed-seed requests on the CPU voice stay identical (issue 12: the service split is a move,
not a change). A real server, real websockets; every frame in arrival order is compared with the golden file
tests/wire_identity.golden.json: binary frames by length and sha256, JSON frames in full except the fields
that measure time or memory (masked). The golden was written at e224f40, before service.py became a package.

The CPU voice's audio depends on the machine's float arithmetic (onnxruntime picks kernels by instruction set:
on session 8's AVX2 machine the same seed gave other samples and a 600-sample shorter first segment), so the
golden holds one recording per arithmetic, each a full wire, told apart by the sha256 of the first audio frame
of the "stream" case. A run must equal, frame for frame, the recording whose first frame it shares; a first
frame no recording has fails (a code change that alters the audio is caught either way). A recording for a new
machine is added from a tree known to match an existing one (session 8: c9a13cc, which passed the e224f40
recording in CI):
  PYTHONPATH=$PWD .venv/bin/python tests/test_wire_identity.py --add "what and where"

The three requests are deterministic whatever the timing: whole text on /v1/stream; on /v1/stream/text the
whole text in the init frame then end (its tail has no sentence mark, so nothing is speculated and the units
follow from the text alone); and one sentence then end, which takes the speculative first unit path (the
speculation is adopted whether its audio or the end comes first: both cut the same unit).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from live_server import Server, metric
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

AWAIT_AUDIO: dict[str, Any] = {}  # in a case's messages: read frames until the first audio, then go on
GOLDEN = Path(__file__).with_name("wire_identity.golden.json")
TEXT = ("The train leaves at nine in the morning. Bring a warm coat, because it gets cold on the platform. "
        "We will meet by the clock, next to the ticket office")
CASES: dict[str, tuple[str, list[dict[str, Any]]]] = {
    "stream": ("/v1/stream", [{"text": TEXT, "voice": "base", "seed": 7, "events": True}]),
    "stream_text": ("/v1/stream/text", [{"text": TEXT, "voice": "base", "seed": 7, "events": True},
                                        {"end": True}]),
    "stream_text_speculative": ("/v1/stream/text", [{"voice": "base", "seed": 5, "events": True},
                                                    {"text": "Sure, I can help with that."}, {"end": True}]),
    # no end until audio came: only the speculation's own audio can cut the turn (_confirm_by_audio)
    "stream_text_speculative_audio_first": ("/v1/stream/text", [{"voice": "base", "seed": 5, "events": True},
                                                                {"text": "Sure, I can help with that."},
                                                                AWAIT_AUDIO, {"end": True}]),
}
# Fields that measure time or memory: their values differ run to run, their presence (and None-ness) does not.
MASKED = {"t_total_ms", "ttfa_ms", "queue_ms", "gen_ms", "rtf", "rss_start_bytes", "rss_end_bytes",
          "rss_peak_bytes"}


def mask(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ("<masked>" if k in MASKED and v is not None else mask(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [mask(v) for v in value]
    return value


def wire(base: str, path: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Every frame the server sends, in order, in the golden's compact form, and the close code."""
    frames: list[Any] = []
    close_code = None

    def receive(ws: Any) -> bool:
        msg = ws.recv(timeout=60)
        if isinstance(msg, bytes):
            frames.append({"bytes": len(msg), "sha256": hashlib.sha256(msg).hexdigest()})
        else:
            frames.append(mask(json.loads(msg)))
        return isinstance(msg, bytes)

    with connect(f"{base}{path}", open_timeout=10, close_timeout=5, max_size=None) as ws:
        try:
            for m in messages:
                if m is AWAIT_AUDIO:
                    while not receive(ws):
                        pass
                else:
                    ws.send(json.dumps(m))
            while True:
                receive(ws)
        except ConnectionClosed as e:
            close_code = e.rcvd.code if e.rcvd is not None else None
    return {"close_code": close_code, "frames": frames}


def record(server: Server) -> dict[str, Any]:
    out = {}
    for name, (path, messages) in CASES.items():
        hits = metric(server.http, "speculation_hits_total")
        out[name] = wire(server.ws, path, messages)
        out[name]["speculation_hits"] = metric(server.http, "speculation_hits_total") - hits
    return out


def first_audio(cases: dict[str, Any]) -> str:
    """The sha256 of the first audio frame of the "stream" case: which machine arithmetic a recording is of."""
    return str(next(f["sha256"] for f in cases["stream"]["frames"] if "bytes" in f))


def test_wire_bytes_match_the_golden(server: Server) -> None:
    recordings = json.loads(GOLDEN.read_text())["recordings"]
    got = record(server)
    # the speculative path really ran
    assert got["stream_text_speculative"]["speculation_hits"] == 1
    assert got["stream_text_speculative_audio_first"]["speculation_hits"] == 1
    for name in CASES:
        assert got[name]["close_code"] == 1000
        assert any("bytes" in f for f in got[name]["frames"]), name
    same = [r for r in recordings if first_audio(r["cases"]) == first_audio(got)]
    assert same, (f"the first audio frame ({first_audio(got)[:16]}...) matches none of the {len(recordings)} "
                  f"recordings in {GOLDEN.name}: the audio changed, or this machine computes the CPU voice "
                  "differently (see the module docstring)")
    golden = same[0]["cases"]
    for name in CASES:
        assert got[name] == golden[name], f"{name}: wire differs from {GOLDEN.name} ({same[0]['note']})"


def test_the_golden_recordings_differ_in_their_first_audio_frame() -> None:
    """One recording per arithmetic: two with the same first frame would make the lookup ambiguous."""
    keys = [first_audio(r["cases"]) for r in json.loads(GOLDEN.read_text())["recordings"]]
    assert len(keys) == len(set(keys)) >= 1


if __name__ == "__main__":  # add a recording: python tests/test_wire_identity.py --add "what and where"
    assert len(sys.argv) == 3 and sys.argv[1] == "--add", __doc__
    import tempfile

    from live_server import start_server, stop_server

    srv = start_server(Path(tempfile.mkdtemp()))
    try:
        data = json.loads(GOLDEN.read_text())
        cases = record(srv)
        if any(first_audio(r["cases"]) == first_audio(cases) for r in data["recordings"]):
            raise SystemExit("this machine's arithmetic already has a recording")
        data["recordings"].append({"note": sys.argv[2], "cases": cases})
        GOLDEN.write_text(json.dumps(data, indent=1) + "\n")
    finally:
        stop_server(srv)
