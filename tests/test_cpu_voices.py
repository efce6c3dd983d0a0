"""The CPU voice and the voice field: every non-clone mode keeps working (auto, base, default, custom + speaker,
hibari's names, OpenAI's names), an OpenAI name whose hibari voice is not installed falls back to heart with
a warning (HTTP X-Warnings, WS terminal frame), an installed one is used, and clone/design/saved voices are
refused naming the engine that can."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
from live_server import Server, start_server, stop_server, ws_exchange

BODY = {"text": "The voice field works.", "seed": 1}


def installed(name: str) -> bool:
    from hibari.voices import voice_path

    try:
        voice_path(name, download_missing=False)
        return True
    except FileNotFoundError:
        return False


def synth(srv: Server, **fields: Any) -> httpx.Response:
    return httpx.post(srv.http + "/v1/synth", json={**BODY, **fields}, timeout=60)


def test_every_non_clone_mode_speaks(server: Server) -> None:
    heart = synth(server)
    assert heart.status_code == 200
    for fields in ({"voice": "auto"}, {"voice": "base"}, {"voice": "default"}, {"voice": "heart"},
                   {"voice": "custom", "speaker": "heart"}, {"voice": "alloy"}, {"voice": "nova"}):
        r = synth(server, **fields)
        assert r.status_code == 200 and r.content == heart.content, fields  # all heart here
        assert "X-Warnings" not in r.headers, fields


@pytest.mark.skipif(installed("fenrir"), reason="hibari's fenrir is installed here: no fallback to see")
def test_a_missing_hibari_voice_falls_back_to_heart_with_a_warning(server: Server) -> None:
    r = synth(server, voice="echo")  # echo → fenrir
    assert r.status_code == 200 and r.content == synth(server).content
    (warning,) = json.loads(r.headers["X-Warnings"])
    assert "'fenrir' is not installed" in warning and "'heart' speaks instead" in warning
    ws = ws_exchange(server.ws + "/v1/stream", [{"text": "Hello.", "voice": "onyx"}])
    assert ws.close_code == 1000 and any("fenrir" in w for w in ws.terminal["warnings"])


def test_clone_design_and_saved_voices_name_the_engine_that_can(server: Server) -> None:
    for fields in ({"voice": "design", "instruct": "female"}, {"voice": "clone", "voice_id": "voice_0123456789abcdef"},
                   {"voice": "voice_0123456789abcdef"}, {"ref_audio_base64": "UklGRg==", "ref_text": "x"}):
        r = synth(server, **fields)
        assert r.status_code == 400 and "omnivoice" in r.json()["error"]["message"], fields
    unknown = synth(server, voice="nobody")
    assert unknown.status_code == 400 and unknown.json()["error"]["field"] == "voice"


def test_an_installed_hibari_voice_is_used(tmp_path: Path) -> None:
    """A HIBARI_HOME holding emma's model file (a copy of heart's weights: no network here) → marin plays
    'emma' (its British G2P), without a warning."""
    import hibari.voices as hv

    home = tmp_path / "hibari"
    home.mkdir()
    shutil.copy(os.path.join(hv.ASSETS, hv.VOICES["heart"]["file"]), home / hv.VOICES["emma"]["file"])
    srv = start_server(tmp_path, "--cpu-workers", "1", env={"HIBARI_HOME": str(home)})
    try:
        r = synth(srv, voice="marin")
        assert r.status_code == 200 and "X-Warnings" not in r.headers
        assert r.content != synth(srv).content  # British G2P of the same text: other phonemes
    finally:
        stop_server(srv)
