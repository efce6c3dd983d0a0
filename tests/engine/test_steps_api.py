"""Diffusion steps through the real server (tiny OmniVoice checkpoint on CPU, a real uvicorn, real websockets):
a request's own num_step is exact; without one a segment runs the server's --num-step; either way each
segment.end event, the stats envelope and /metrics (realtime_tts_segment_steps) say how many steps it ran."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from live_server import metric, start_server, stop_server
from websockets.sync.client import connect

TEXT = "The first sentence is here. And then a second one follows it."


@pytest.fixture(scope="module")
def server(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    srv = start_server(tmp_path_factory.mktemp("steps"), "--model", str(tiny_checkpoint), "--device", "cpu",
                       "--num-step", "6", "--min-num-step", "3", timeout_s=300)
    yield srv
    stop_server(srv)


def stream(srv: Any, **fields: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """WS /v1/stream with segment events → (segment.end events, the stats envelope)."""
    ends, stats = [], None
    with connect(f"{srv.ws}/v1/stream", open_timeout=30) as ws:
        ws.send(json.dumps({"text": TEXT, "events": True, "seed": 1, **fields}))
        for message in ws:
            if isinstance(message, bytes):
                continue
            obj = json.loads(message)
            if obj.get("type") == "segment.end":
                ends.append(obj)
            elif obj.get("type") == "error":
                raise AssertionError(obj)
            elif obj.get("done"):
                stats = obj["stats"]
                break
    assert stats is not None
    return ends, stats


def test_named_and_default_steps_are_reported_per_segment(server: Any) -> None:
    before = metric(server.http, "segment_steps_count")
    named, stats = stream(server, num_step=4)
    assert named and [e["num_steps"] for e in named] == [4] * len(named)
    assert stats["num_steps"] == [4] * len(named)
    default, stats = stream(server)  # the server's --num-step: an idle card carries it
    assert default and [e["num_steps"] for e in default] == [6] * len(default)
    assert stats["num_steps"] == [6] * len(default)
    assert metric(server.http, "segment_steps_count") - before == len(named) + len(default)
    assert metric(server.http, "segment_steps_bucket", le="4.0") >= len(named)  # read off the buckets
