"""Drive one stock TTS plugin (pipecat or LiveKit Agents; Cartesia, ElevenLabs, Deepgram or OpenAI) against a
realtime_tts server, offline, and print what it received as one JSON line.

Runs in the plugin venv (tests/plugins/requirements.txt: pipecat-ai and livekit-agents pin soxr/soundfile/
protobuf versions the server's venv does not use), so it imports nothing of realtime_tts:

    python tests/plugins/drive.py pipecat cartesia http://127.0.0.1:PORT

Three turns per plugin, as an agent speaks them: a short answer (sample rate, audio seconds, first-audio ms,
word timings), a long answer interrupted about 1 s after its first audio the plugin's own way (pipecat's
InterruptionFrame; LiveKit closes the stream) with the audio seconds before and after the interruption, and the
next short answer right after it (LiveKit replaces the interrupted socket then). Prints a JSON list, one object
per turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from typing import Any

SHORT = "Hello there, this is a short test. It has a second sentence as well."
LONG = " ".join(f"This is sentence number {i} of a long answer that the listener will interrupt." for i in range(1, 101))
INTERRUPT_AFTER_S = 1.0
RATE = 24000
KEY = os.environ.get("DRIVE_API_KEY", "test-key")  # a server without keys takes any
VOICE = {"cartesia": "a0e99841-438c-4a64-b679-ae501e7d6091", "elevenlabs": "21m00Tcm4TlvDq8EDcDR",
         "deepgram": "aura-2-thalia-en", "openai": "alloy"}


# -- pipecat ------------------------------------------------------------------------------------------------------

def pipecat_service(plugin: str, base: str) -> Any:
    ws = base.replace("http", "ws", 1)
    if plugin == "cartesia":
        from pipecat.services.cartesia.tts import CartesiaTTSService
        return CartesiaTTSService(api_key=KEY, url=f"{ws}/tts/websocket", sample_rate=RATE,
                                  settings=CartesiaTTSService.Settings(voice=VOICE[plugin]))
    if plugin == "elevenlabs":
        from pipecat.services.elevenlabs.tts import ElevenLabsTTSService
        return ElevenLabsTTSService(api_key=KEY, url=ws, sample_rate=RATE,
                                    settings=ElevenLabsTTSService.Settings(voice=VOICE[plugin]))
    if plugin == "deepgram":
        from pipecat.services.deepgram.tts import DeepgramTTSService
        return DeepgramTTSService(api_key=KEY, base_url=ws, sample_rate=RATE,
                                  settings=DeepgramTTSService.Settings(voice=VOICE[plugin]))
    from pipecat.services.openai.tts import OpenAITTSService
    return OpenAITTSService(api_key=KEY, base_url=f"{base}/v1", sample_rate=RATE,
                            settings=OpenAITTSService.Settings(voice=VOICE[plugin]))


async def pipecat_run(plugin: str, base: str) -> list[dict[str, Any]]:
    from pipecat.frames.frames import (
        Frame,
        InterruptionFrame,
        LLMFullResponseEndFrame,
        LLMFullResponseStartFrame,
        LLMTextFrame,
        TTSAudioRawFrame,
        TTSTextFrame,
    )
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
    from pipecat.tests.utils import SleepFrame, run_test

    starts: list[float] = []  # when each turn's text began, seen before the TTS
    interrupts: list[float] = []
    arrivals: list[tuple[float, Any]] = []  # audio and word frames after the TTS

    class Before(FrameProcessor):  # type: ignore[misc]  # (pipecat is not in the server's venv, where mypy runs)
        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, LLMFullResponseStartFrame):
                starts.append(time.monotonic())
            if isinstance(frame, InterruptionFrame):
                interrupts.append(time.monotonic())
            await self.push_frame(frame, direction)

    class After(FrameProcessor):  # type: ignore[misc]
        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, TTSAudioRawFrame | TTSTextFrame):
                arrivals.append((time.monotonic(), frame))
            await self.push_frame(frame, direction)

    def turn(text: str) -> list[Frame]:
        words = text.split(" ")  # as an LLM streams it: a few words per frame
        chunks = [" ".join(words[i:i + 4]) + " " for i in range(0, len(words), 4)]
        return [LLMFullResponseStartFrame(), *[LLMTextFrame(c) for c in chunks], LLMFullResponseEndFrame()]

    # run_test has no clock of its own: the sleeps leave each short answer time to arrive whole, also on a
    # loaded machine (the tests run the 8 plugins at once on 2 cores)
    frames = [*turn(SHORT), SleepFrame(6.0), *turn(LONG), SleepFrame(INTERRUPT_AFTER_S + 1.0), InterruptionFrame(),
              SleepFrame(0.5), *turn(SHORT), SleepFrame(8.0)]
    await run_test(Pipeline([Before(), pipecat_service(plugin, base), After()]), frames_to_send=frames,
                   start_timeout=10.0)
    order: list[str] = []  # context ids in the order their first frame arrived: one per turn
    for _, f in arrivals:
        if f.context_id not in order:
            order.append(f.context_id)
    turns = []
    for k, context_id in enumerate(order[:3]):
        audio = [(t, f.sample_rate, len(f.audio) // 2) for t, f in arrivals
                 if isinstance(f, TTSAudioRawFrame) and f.context_id == context_id]
        texts = [f for _, f in arrivals if isinstance(f, TTSTextFrame) and f.context_id == context_id]
        turns.append(summary(starts[k] if k < len(starts) else starts[-1], audio,
                             interrupts[0] if k == 1 and interrupts else None,
                             words=[f.text for f in texts], timed=[f.pts / 1e9 for f in texts if f.pts]))
    return turns


# -- LiveKit Agents ---------------------------------------------------------------------------------------------------

def livekit_tts(plugin: str, base: str) -> Any:
    if plugin == "cartesia":
        from livekit.plugins import cartesia
        return cartesia.TTS(api_key=KEY, voice=VOICE[plugin], base_url=base, sample_rate=RATE)
    if plugin == "elevenlabs":
        from livekit.plugins import elevenlabs
        return elevenlabs.TTS(api_key=KEY, voice_id=VOICE[plugin], base_url=f"{base}/v1", encoding="pcm_24000")
    if plugin == "deepgram":
        from livekit.plugins import deepgram
        return deepgram.TTS(api_key=KEY, model=VOICE[plugin], base_url=f"{base}/v1/speak", sample_rate=RATE)
    from livekit.plugins import openai
    return openai.TTS(api_key=KEY, base_url=f"{base}/v1", voice=VOICE[plugin])


async def livekit_run(plugin: str, base: str) -> list[dict[str, Any]]:
    from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT
    from livekit.agents.utils import http_context

    async def turn(tts: Any, text: str, interrupt: bool) -> dict[str, Any]:
        frames: list[tuple[float, int, int]] = []
        words: list[str] = []
        timed: list[float] = []
        interrupted_at: float | None = None
        t0 = time.monotonic()
        if plugin == "openai":
            stream: Any = tts.synthesize(text)
        else:
            stream = tts.stream()
            for i in range(0, len(text), 20):  # as an LLM streams it
                stream.push_text(text[i:i + 20])
            stream.flush()
            stream.end_input()

        async def consume() -> None:
            async for ev in stream:
                frames.append((time.monotonic(), ev.frame.sample_rate, ev.frame.samples_per_channel))
                for t in ev.frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, []) or []:
                    words.append(str(t))
                    if getattr(t, "start_time", None) is not None:
                        timed.append(float(t.start_time))

        task = asyncio.create_task(consume())
        if interrupt:
            while not frames and not task.done():
                await asyncio.sleep(0.01)
            await asyncio.sleep(INTERRUPT_AFTER_S)
            interrupted_at = time.monotonic()
            await stream.aclose()  # what an AgentSession does to the TTS stream on an interruption
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 60)
        return summary(t0, frames, interrupted_at, words=words, timed=timed)

    async with http_context.open():
        tts = livekit_tts(plugin, base)
        turns = [await turn(tts, SHORT, False), await turn(tts, LONG, True)]
        await asyncio.sleep(0.5)
        turns.append(await turn(tts, SHORT, False))  # the next answer: LiveKit replaces the interrupted socket
        await asyncio.sleep(1.0)  # the interrupted turn's audio, if any still came, would show up here
        await tts.aclose()
    return turns


# -- common ---------------------------------------------------------------------------------------------------------

def summary(t0: float, frames: list[tuple[float, int, int]], interrupted_at: float | None, *,
            words: list[str], timed: list[float]) -> dict[str, Any]:
    rates = sorted({r for _, r, _ in frames})
    rate = rates[0] if rates else RATE
    out: dict[str, Any] = {
        "sample_rates": rates,
        "audio_s": round(sum(n for _, _, n in frames) / rate, 3),
        "first_audio_ms": round((frames[0][0] - t0) * 1000, 1) if frames else None,
        "frames": len(frames),
        "words": words,
        "timed_words": len(timed),
        # word start times in s from the first word's (pipecat: presentation times; LiveKit: start_time)
        "timed_s": [round(t - timed[0], 3) for t in timed],
    }
    if interrupted_at is not None:
        out["audio_s_before_interrupt"] = round(sum(n for t, _, n in frames if t <= interrupted_at) / rate, 3)
        out["audio_s_after_interrupt"] = round(sum(n for t, _, n in frames if t > interrupted_at + 0.2) / rate, 3)
        out["last_audio_after_interrupt_ms"] = round((frames[-1][0] - interrupted_at) * 1000, 1) if frames else None
    return out


def run_in(python: str, framework: str, plugin: str, base: str, *, timeout_s: float = 180) -> list[dict[str, Any]]:
    """Run this driver under `python` (the plugin venv's) and return its turns; for the test and the bench, which
    run in the server's venv and import only this function (stdlib)."""
    import subprocess

    proc = subprocess.run([python, __file__, framework, plugin, base], capture_output=True, text=True,
                          timeout=timeout_s, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not lines:
        raise RuntimeError(f"{framework} {plugin}: exit {proc.returncode}\n{proc.stderr[-4000:]}")
    turns: list[dict[str, Any]] = json.loads(lines[-1][len("RESULT "):])
    return turns


def main() -> None:
    framework, plugin, base = sys.argv[1:4]
    run = pipecat_run if framework == "pipecat" else livekit_run
    print("RESULT " + json.dumps(asyncio.run(run(plugin, base))))


if __name__ == "__main__":
    main()
