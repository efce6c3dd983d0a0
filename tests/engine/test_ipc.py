"""IPC messages: every message round-trips through msgpack, audio travels as raw bytes."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from realtime_tts.engine import ipc


def test_every_message_round_trips() -> None:
    prompt = ipc.Prompt("hello there", np.arange(16, dtype="<i2").tobytes(), 8, 1, 0.1)
    to_worker: list[ipc.ToWorker] = [
        ipc.Submit("r1", "Hello.", mode="clone", prompt=prompt, seed=3, priority=0, deadline_s=12.5),
        ipc.Submit("r2", "Hi", mode="design", instruct="female, low pitch"),
        ipc.Abort("r1"),
        ipc.EncodeVoice("v1", np.zeros(10, "<f4").tobytes(), 16000, "hi"),
        ipc.Shutdown(),
    ]
    for message in to_worker:
        assert ipc.decode_to_worker(ipc.encode(message)) == message
    samples = np.linspace(-1, 1, 960, dtype="<f4")
    from_worker: list[ipc.FromWorker] = [
        ipc.Ready(0, "cpu", 24000, "tiny", 123),
        ipc.Audio("r1", samples.tobytes(), "f32le", 24000, last=True, queue_ms=1.5, gen_ms=20.0, batch_size=2.5),
        ipc.VoiceEncoded("v1", prompt),
        ipc.Failed("r1", "bad_request", "instruct: nope", field="instruct"),
        ipc.Stats(0, 1, 2, 3, 4, 5, 6.0, 7, 8, 9, 10, [1.5, 2.5]),
        ipc.Fatal(0, "no model"),
    ]
    for message in from_worker:
        assert ipc.decode_from_worker(ipc.encode(message)) == message
    audio = ipc.decode_from_worker(ipc.encode(from_worker[1]))
    assert isinstance(audio, ipc.Audio)
    np.testing.assert_array_equal(np.frombuffer(audio.samples, "<f4"), samples)


def test_direction_is_enforced() -> None:
    import msgspec

    with pytest.raises(msgspec.ValidationError):
        ipc.decode_to_worker(ipc.encode(ipc.Fatal(0, "x")))
    with pytest.raises(msgspec.ValidationError):
        ipc.decode_from_worker(ipc.encode(ipc.Abort("x")))


def test_web_side_engine_modules_do_not_import_torch() -> None:
    code = ("import sys; import realtime_tts.engine.client, realtime_tts.engine.ipc, "
            "realtime_tts.gpu_worker.scheduler, realtime_tts.gpu_worker.loop; "
            "bad = [m for m in ('torch', 'realtime_tts.model', 'transformers') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
