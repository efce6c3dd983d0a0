"""The model side of an OmniVoice worker: the Backend the step loop drives, and ModelBackend over
realtime_tts.model and gpu_worker/runner's StepRunner. torch and the model are imported only inside
ModelBackend (the web process imports gpu_worker.loop, which imports this module, for the spawn target).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from realtime_tts.engine import ipc
from realtime_tts.engine.base import VoicePrompt

log = logging.getLogger("realtime_tts.worker")
# Decoded prompts a worker keeps (saved voices, conversation prompts): a hot voice is made into tensors once.
PROMPT_CACHE_SIZE = 256


class Backend(Protocol):
    """What the loop needs from the model side (ModelBackend below, which steps through gpu_worker/runner's
    StepRunner). Tensors stay inside; the loop only sees opaque per-segment states."""

    device: str
    model_name: str
    sample_rate: int
    max_batch_items: int  # the largest batch a step runs well (CUDA: the largest captured graph width)
    max_batch_tokens: int  # the largest step it runs well (CUDA: the largest token bucket)
    token_buckets: tuple[int, ...]  # a step costs the smallest of these holding its tokens (() = no buckets)
    step_points: list[tuple[int, float]] | None  # measured (tokens, seconds) of one step per size, or None

    def prepare(self, submit: ipc.Submit) -> tuple[Any, int, int]:
        """→ (state, tokens it adds to a step, number of steps). Raises errors.TTSError on bad input.
        submit.num_step is set (the loop resolves the worker's default)."""

    def with_num_steps(self, state: Any, num_steps: int) -> Any:
        """A prepared state, not yet stepped, remade to run num_steps steps (the same tokens per step); may be
        the same object, changed."""

    def step(self, states: list[Any]) -> None:
        """One diffusion step for every state (each at its own step index). May return before the device has
        run it: decode() waits for what it needs."""

    def release(self, state: Any) -> None:
        """Drop an unfinished state (cancelled or failed): free what it holds on the device."""

    def decode(self, states: list[Any]) -> list[bytes]:
        """Finished states → float32 little-endian mono audio, one per state, batched. Called from the loop's
        decode thread while the loop thread steps."""

    def bind_thread(self) -> None:
        """Run once in the decode thread before its first decode (e.g. select the device)."""

    def encode_prompt(self, audio: bytes, sample_rate: int, ref_text: str) -> ipc.Prompt: ...

    def codes(self, state: Any) -> tuple[bytes, int]:
        """A finished state's generated codes: (int16 little-endian [num_codebooks, frames], num_codebooks).
        Called from the decode thread (waits for the device like decode)."""

    def counters(self) -> tuple[int, int]:
        """(CUDA graph hits, misses) so far."""

    def device_times(self) -> DeviceTimes:
        """Cumulative device-side timings so far (zeros where not measured, e.g. on the CPU)."""

    def idle(self) -> None:
        """The loop has nothing to run now (the time until its next step is no gap between steps)."""


@dataclass(frozen=True, slots=True)
class DeviceTimes:
    """Cumulative seconds: the loop blocked waiting for the device to catch up (inside step()), the device
    running steps, the device idle between steps while the loop was busy, the device running codec decodes; and
    cumulative counts of codec calls and of the items they decoded."""

    wait_s: float = 0.0
    busy_s: float = 0.0
    gap_s: float = 0.0
    codec_s: float = 0.0
    codec_calls: int = 0  # codec calls (graph replays + eager calls) and the items they decoded
    codec_items: int = 0


class ModelBackend:
    """Backend over realtime_tts.model, stepping through gpu_worker/runner.StepRunner (CUDA: fused Triton
    backbone + CUDA graphs per bucket with eager fallback; CPU: the model's eager packed step) and decoding
    finished segments together through the codec. torch is imported here, inside the worker process.
    """

    def __init__(self, options: ipc.WorkerOptions) -> None:
        import torch

        from realtime_tts import model as ov
        from realtime_tts.gpu_worker.runner import StepRunner

        # Decodes run in the loop's decode thread while steps run here; a CUDA graph capture must not see
        # another thread's CUDA work (global capture mode), so captures and decodes exclude each other.
        self._cuda_lock = threading.Lock()
        if options.num_threads > 0:
            torch.set_num_threads(options.num_threads)
        if options.device.startswith("cuda"):
            torch.cuda.set_device(torch.device(options.device))
        self._ov = ov
        self.model = ov.OmniVoiceModel.from_pretrained(options.model_dir, dtype=options.dtype,
                                                       device=options.device)
        # Room for every bucket serving_keys() lists (~290 at a 16k budget; each holds only its small static
        # inputs, the graphs share one memory pool).
        self.runner = StepRunner(self.model, max_graphs=400, max_slots=options.max_active,
                                 codec_graph_frames=options.codec_graph_frames, precision=options.precision,
                                 swiglu_gemm_min_tokens=options.swiglu_gemm_min_tokens,
                                 fp8_matmuls=options.fp8_matmuls,
                                 capture_lock=self._cuda_lock)
        self._budget = options.max_batch_tokens
        self._policy = options.policy
        self.device = options.device
        self.model_name = os.path.basename(options.model_dir.rstrip("/"))
        self.sample_rate = int(self.model.codec.sample_rate)
        if self.runner.use_graphs:
            self.max_batch_items = max(self.runner.batch_buckets)
            self.max_batch_tokens = max(self.runner.token_buckets)
            self.token_buckets: tuple[int, ...] = tuple(self.runner.token_buckets)
        else:
            self.max_batch_items, self.max_batch_tokens, self.token_buckets = 256, 1 << 30, ()
        self._rng = random.Random()
        self._prompts: collections.OrderedDict[str, Any] = collections.OrderedDict()  # key → ClonePrompt
        # (frames, steps, t_shift) → reveal schedule: load-adaptive steps remake waiting segments often
        self._reveals: dict[tuple[int, int, float], tuple[int, ...]] = {}
        self.step_points: list[tuple[int, float]] | None = None
        # Codec decodes run on their own stream (decode thread), beside the steps instead of between them.
        self._decode_stream: Any = (torch.cuda.Stream(self.model.device)  # type: ignore[no-untyped-call]
                                    if self.model.device.type == "cuda" else None)
        self._codec_s = 0.0  # device time of the decodes (timing events on the decode stream)
        if self.model.device.type == "cuda":
            self._warm_up()

    def _warm_up(self, capture_s: float = 30.0) -> None:
        """Compile the Triton kernels and load cuBLAS/codec before Ready, so no request pays for it; then capture
        the CUDA graphs of the buckets serving lands in. Captured on first use instead, they stalled the
        worker mid-serving (H200 run: captures of up to 1.0 s during the agent runs; N=25 had a worse p95
        than N=50). bench/omnivoice_sched_sim.py --keys: these buckets cover every step of the bench's runs."""
        import torch

        state, _, num_steps = self.prepare(ipc.Submit("warm-up", "Warm up.", duration_s=1.0, num_step=2, seed=0))
        for _ in range(num_steps):
            self.step([state])
        self.decode([state])
        # The codec's Snake kernel (kernels/snake.py) compiles one variant per tile width and per divisibility
        # of its strides by 16, i.e. per length mod 16 at each decoder stage: 1-16 frames cover them all. Left
        # to the first requests, those compiles stalled the decode thread (H200 call 4: 25 agents' p95 first
        # audio 775 ms, against 154 ms at 100 agents run after them).
        self.model.codec.decode([torch.zeros(self.model.num_codebooks, t, dtype=torch.long) for t in range(1, 17)])
        # the padded batches' masked kernels and the codec graphs serving decodes land in (codec_graphs.py)
        t0 = time.perf_counter()
        if num_codec := self.runner.warm_codec():
            log.info("captured %d codec graphs in %.1f s", num_codec, time.perf_counter() - t0)
        if self.runner.use_graphs:
            budget = min(self._budget, self.max_batch_tokens)
            t0 = time.perf_counter()
            keys = self.runner.serving_keys(budget)
            captured = self.runner.capture_startup(budget, max_seconds=capture_s, keys=keys)
            log.info("captured %d of %d serving graph buckets in %.1f s", captured, len(keys),
                     time.perf_counter() - t0)
            # The deadline policy plans with these; the log line is also the step-time model the scheduler
            # simulation reads (bench/omnivoice_serve.py saves it, bench/omnivoice_costs.py), under any policy.
            self.step_points = self._time_steps(budget)
            log.info("step times (tokens: ms): %s", ", ".join(f"{n}: {1000 * s:.2f}" for n, s in self.step_points))

    def _time_steps(self, max_tokens: int, reps: int = 3) -> list[tuple[int, float]]:
        """(token bucket, seconds of one step) on this device for every token bucket up to max_tokens, each
        timed on a batch of real 2.4 s sentences that fills it (what the deadline scheduler plans with)."""
        import statistics

        import torch

        base, item_tokens, _ = self.prepare(ipc.Submit("calibrate", "One two three four five six seven.",
                                                       duration_s=2.4, num_step=32, seed=0))
        points = []
        for bucket in self.runner.token_buckets:
            if bucket > max_tokens:
                break
            num = min(self.max_batch_items, max(1, bucket // item_tokens))
            states = [self._ov.ItemState.start(base.item) for _ in range(num)]
            self.runner.step(states)  # lays the batch out (captures its graph if start-up did not)
            times = []
            for _ in range(reps):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                self.runner.step(states)
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
            for s in states:
                self.runner.release(s)
            points.append((bucket, statistics.median(times)))
        return points

    def _clone_prompt(self, p: ipc.Prompt) -> Any:
        """ipc.Prompt → ClonePrompt (codes as a tensor), through the LRU when the prompt has a key."""
        key = p.key
        prompt = self._prompts.get(key) if key is not None else None
        if key is not None and prompt is not None and prompt.ref_text == p.ref_text \
                and prompt.codes.shape[-1] == p.num_frames:
            self._prompts.move_to_end(key)
            return prompt
        prompt = self._ov.ClonePrompt.from_voice_prompt(VoicePrompt("omnivoice", p.ref_text, p.codes,
                                                                    p.num_codebooks, p.num_frames, p.ref_rms))
        if p.key is not None:
            self._prompts[p.key] = prompt
            while len(self._prompts) > PROMPT_CACHE_SIZE:
                self._prompts.popitem(last=False)
        return prompt

    def prepare(self, submit: ipc.Submit) -> tuple[Any, int, int]:
        ov = self._ov
        prompt = self._clone_prompt(submit.prompt) if submit.prompt is not None else None
        assert submit.num_step is not None, "the loop resolves the default num_step"
        params = ov.DecodeParams(num_step=submit.num_step, guidance_scale=submit.guidance_scale,
                                 position_temperature=submit.position_temperature,
                                 class_temperature=submit.temperature)
        # No seed: a fresh one, so repeated requests vary; with a seed the audio is reproducible and does
        # not depend on which other segments share the batch (per-item counter-based noise).
        seed = submit.seed if submit.seed is not None else self._rng.getrandbits(62)
        item = ov.prepare(self.model, submit.text, language=submit.language, instruct=submit.instruct,
                          prompt=prompt, speed=submit.speed, duration_s=submit.duration_s, params=params,
                          denoise=submit.denoise, seed=seed)
        if submit.prompt is not None and submit.prompt.generated:
            item = dataclasses.replace(item, ref_rms=None)  # loudness as auto/design audio (match_loudness)
        self.runner.check(item)
        state = ov.ItemState.start(item)  # on the host: the runner copies it into a device slot at its first step
        return state, item.num_tokens, len(item.reveal)

    def with_num_steps(self, state: Any, num_steps: int) -> Any:
        assert state.step == 0, "only a segment that has not started changes its steps"
        item = state.item
        params = dataclasses.replace(item.params, num_step=num_steps)
        key = (item.num_frames, num_steps, params.t_shift)
        reveal = self._reveals.get(key)
        if reveal is None:
            if len(self._reveals) >= 8192:
                self._reveals.clear()
            reveal = self._reveals[key] = self._ov.reveal_schedule(item.num_frames, num_steps, params.t_shift,
                                                                   self.model.num_codebooks)
        state.item = dataclasses.replace(item, params=params, reveal=reveal)  # nothing revealed yet: same grid
        return state

    def step(self, states: list[Any]) -> None:
        self.runner.step(states)

    def release(self, state: Any) -> None:
        self.runner.release(state)

    def decode(self, states: list[Any]) -> list[bytes]:
        with self._cuda_lock:
            stream = self._decode_stream
            if stream is None:
                waves = self.runner.decode(states)
            else:
                import torch

                for event in {id(s.ready): s.ready for s in states if s.ready is not None}.values():
                    stream.wait_event(event)  # the grids were copied out of their slots on the step stream
                start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
                # the decode thread sleeps until its decode is done instead of polling the driver (host_copy.py)
                end = torch.cuda.Event(enable_timing=True, blocking=True)  # type: ignore[no-untyped-call]
                with torch.cuda.stream(stream):
                    start.record()
                    waves = self.runner.decode(states)  # its copy to the host waits for the decode
                    end.record()
                end.synchronize()
                self._codec_s += start.elapsed_time(end) / 1000.0
        return [self._ov.fade_edges(self._ov.match_loudness(w, s.item.ref_rms), self.sample_rate).astype("<f4")
                .tobytes() for w, s in zip(waves, states, strict=True)]

    def bind_thread(self) -> None:
        if self.device.startswith("cuda"):
            import torch

            with self._cuda_lock:  # not while a capture runs
                torch.cuda.set_device(torch.device(self.device))  # per thread: the decode thread's default is cuda:0

    def encode_prompt(self, audio: bytes, sample_rate: int, ref_text: str) -> ipc.Prompt:
        import numpy as np

        wave = np.frombuffer(audio, dtype="<f4").astype(np.float32)
        with self._cuda_lock:  # the codec is the decode thread's too
            vp = self.model.encode_prompt(wave, sample_rate, ref_text).to_voice_prompt()
        return ipc.Prompt(vp.ref_text, vp.codes, vp.num_codebooks, vp.num_frames, vp.ref_rms)

    def codes(self, state: Any) -> tuple[bytes, int]:
        from realtime_tts.gpu_worker.host_copy import to_host

        stream = self._decode_stream
        if stream is None or state.ready is None:  # CPU: the grid is on the host already
            grid = to_host(state.tokens)
        else:
            import torch

            # On the decode stream, behind the step that copied the grid out of its slot (state.ready) and nothing
            # else: a copy on the default stream (the steps') would also wait for the steps queued after it.
            with torch.cuda.stream(stream):
                stream.wait_event(state.ready)
                grid = to_host(state.tokens)
        codes = grid.numpy().astype("<i2")  # [8, frames]
        return codes.tobytes(), int(codes.shape[0])

    def counters(self) -> tuple[int, int]:
        """(CUDA graph hits, misses) so far."""
        return self.runner.stats.graph_hits, self.runner.stats.graph_misses

    def device_times(self) -> DeviceTimes:
        st = self.runner.stats
        calls, items = self.runner.codec_counts()
        return DeviceTimes(st.wait_s, st.gpu_busy_s, st.gpu_gap_s, self._codec_s, calls, items)

    def idle(self) -> None:
        self.runner.idle()
