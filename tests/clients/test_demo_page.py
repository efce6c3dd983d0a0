"""GET /demo end to end: the session's real server, the page driven in headless Chromium (Debian's chromium,
started and stopped by Playwright on loopback). It types text, checks that audio buffers were scheduled with
Web Audio and first-audio latency shown, Stop ends the stream (cancel with played_ms) and shows what was heard;
an LLM-paced reply streams word by word to the end. Screenshots: tests/artifacts/demo.png (after Stop) and
tests/artifacts/demo_playing.png (mid-reply)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from live_server import REPO, Server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = REPO / "tests" / "artifacts"
LONG_TEXT = ("The quick brown fox jumps over the lazy dog. " * 3 + "This sentence is about the weather today. "
             "It will be sunny in the morning and rainy in the evening. " * 2).strip()

if CHROMIUM is None and os.environ.get("CI"):  # CI installs it (.ci/run): a missing browser is a failure there
    raise RuntimeError("chromium is not installed (apt-get install chromium)")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")


@pytest.fixture(scope="module")
def page(server: Server) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox",  # CI runs as root
            "--autoplay-policy=no-user-gesture-required",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",  # loopback only
        ])
        try:
            pg = browser.new_page(viewport={"width": 960, "height": 900})
            errors: list[str] = []
            pg.on("pageerror", lambda e: errors.append(str(e)))
            pg.goto(server.http + "/demo")
            pg.wait_for_function("document.querySelectorAll('#voice option').length >= 1")
            yield pg
            assert not errors, errors  # no uncaught exception in the page's script
        finally:
            browser.close()


def test_demo_is_served_from_the_package(server: Server) -> None:
    r = httpx.get(server.http + "/demo")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html") and "demo.js" in r.text
    js = httpx.get(server.http + "/demo/demo.js")
    assert js.status_code == 200 and "AudioContext" in js.text
    assert "GET /demo" in httpx.get(server.http + "/").json()["endpoints"]


def test_voice_picker_lists_presets_and_saved_voices(page: Any, server: Server) -> None:
    models = httpx.get(server.http + "/v1/models").json()["data"]
    presets = next(m for m in models if m["default"])["capabilities"]["presets"]
    options = page.eval_on_selector_all("#voice option", "os => os.map(o => o.value)")
    assert options[0] == "auto" and set(presets) - {"auto"} <= set(options)
    saved = httpx.get(server.http + "/v1/voices")
    if saved.status_code == 404:  # a server without the voice library: the page says so and goes on
        assert page.evaluate("window.demo.voices") is None and "unavailable" in page.inner_text("#voice-note")
    else:
        ids = [v["voice_id"] for v in saved.json()["data"]]
        assert page.evaluate("window.demo.voices") == len(ids) and set(ids) <= set(options)


def test_typed_text_plays_gaplessly(page: Any) -> None:
    page.fill("#text", LONG_TEXT)
    page.click("#speak")
    page.wait_for_function("window.demo.buffersScheduled >= 8 && window.demo.segments.length >= 1", timeout=30_000)
    page.wait_for_function("window.demo.playedMs > 600", timeout=15_000)  # the AudioContext's clock runs
    state = page.evaluate("window.demo")
    assert state["mode"] in ("session", "simple") and state["firstAudioMs"] is not None
    # session mode negotiates the AudioContext's own rate; simple mode is always 24 kHz
    ctx_rate = page.evaluate("audioCtx.sampleRate")
    assert state["rate"] == (ctx_rate if state["mode"] == "session" else 24000)
    assert 0 < state["firstAudioMs"] < 10_000 and state["state"] in ("playing", "finishing")
    assert abs(int(page.inner_text("#first-audio")) - state["firstAudioMs"]) <= 1  # shown (JS rounds half up)
    assert page.locator("#segments span.speaking").count() == 1  # the segment being spoken is shown
    page.wait_for_function("window.demo.doneReason !== null", timeout=30_000)
    state = page.evaluate("window.demo")
    assert state["doneReason"] == "end" and state["errors"] == []
    assert " ".join(s["text"] for s in state["segments"]).split() == LONG_TEXT.split()  # every word was spoken
    # the server sends faster than real time, the page keeps ahead of the clock: no buffer started late
    assert state["underruns"] == 0 and abs(state["audioSeconds"] - 12.5) < 6
    page.click("#stop")  # playback is still running: Stop silences it (the server had already finished)
    page.wait_for_function("window.demo.state === 'stopped'", timeout=10_000)


def test_llm_reply_streams_and_stop_cancels_it(page: Any) -> None:
    page.click("#llm")  # ~55 words at ~12 words/s: still streaming when Stop is clicked
    # Stop once the first segment has been heard to its end (the server reports at least segment granularity)
    page.wait_for_function("window.demo.segments.length >= 2 && window.demo.playedMs > 150 + "
                           "1000 * window.demo.segments[1].audio_start_sample / window.demo.rate", timeout=30_000)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "demo_playing.png"), full_page=True)
    assert page.evaluate("window.demo.doneReason") is None, "the reply finished before Stop: nothing to cancel"
    page.click("#stop")
    page.wait_for_function("window.demo.state === 'stopped'", timeout=15_000)
    stopped = page.evaluate("window.demo")
    reply = page.input_value("#text")
    assert stopped["doneReason"] == "cancelled"  # the server confirmed the cancel (terminal frame / context.done)
    first = stopped["segments"][0]["text"].strip()
    spoken = stopped["textSpoken"].strip()
    assert spoken.startswith(first) and reply.startswith(spoken) and len(spoken) < len(reply), spoken
    assert spoken in page.inner_text("#spoken")
    page.wait_for_timeout(700)  # nothing is scheduled after Stop
    assert page.evaluate("window.demo.buffersScheduled") == stopped["buffersScheduled"]
    page.screenshot(path=str(ARTIFACTS / "demo.png"), full_page=True)
