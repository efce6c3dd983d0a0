"""Text the CPU voice cannot speak is refused with an error naming the engine that can (never a silent 200), and
request fields it ignores come back as warnings; against the real server and the real CPU voice."""

from __future__ import annotations

import json

import httpx
import pytest
from live_server import Server, assert_speech, ws_exchange

from realtime_tts.engine.cpu import foreign_letters


@pytest.mark.parametrize("text", ["你好，世界。", "Hello 世界, how are you?", "Привет, как дела?", "こんにちは"])
def test_text_in_another_script_names_the_engine_that_can_speak_it(server: Server, text: str) -> None:
    r = httpx.post(f"{server.http}/v1/audio/speech", json={"input": text}, timeout=30)
    assert r.status_code == 400, r.status_code
    err = r.json()["error"]
    assert err["field"] == "text" and "omnivoice" in err["message"] and "English" in err["message"], err
    w = ws_exchange(f"{server.ws}/v1/stream", [{"text": text}])
    assert w.close_code == 1008 and w.frames == [] and w.texts[-1]["field"] == "text"


def test_incremental_text_in_another_script_fails_the_stream_clearly(server: Server) -> None:
    w = ws_exchange(f"{server.ws}/v1/stream/text", [{"seed": 1}, {"text": "Okay. "}, {"text": "这是中文。"},
                                                    {"end": True}])
    assert w.close_code == 1008, (w.close_code, w.texts)
    assert w.texts[-1]["type"] == "error" and w.texts[-1]["field"] == "text" and "omnivoice" in w.texts[-1]["message"]


def test_latin_text_with_accents_emoji_and_a_stray_symbol_is_spoken(server: Server) -> None:
    assert foreign_letters("Café, naïve résumé 🙂 at 5 π.") == ""
    r = httpx.post(f"{server.http}/v1/audio/speech", json={"input": "Café au lait, naïve résumé. 🙂",
                                                            "response_format": "pcm"}, timeout=60)
    assert r.status_code == 200


def test_fields_the_cpu_voice_ignores_come_back_as_warnings(server: Server) -> None:
    r = httpx.post(f"{server.http}/v1/audio/speech", timeout=60,
                   json={"input": "Hello there.", "duration": 3.0, "num_step": 8, "response_format": "pcm"})
    assert r.status_code == 200
    warnings = json.loads(r.headers["X-Warnings"])
    assert "duration is ignored by the 'cpu' engine" in warnings and "num_step is ignored by the 'cpu' engine" in warnings
    w = ws_exchange(f"{server.ws}/v1/stream", [{"text": "Hello there.", "duration": 3.0, "seed": 2}])
    assert w.close_code == 1000 and "duration is ignored by the 'cpu' engine" in w.terminal["warnings"]
    assert_speech(w.pcm, min_s=0.4, max_s=3.0)
