"""Engines as the web process sees them: the Engine protocol (base), the CPU voice (cpu), the client side of
the OmniVoice worker processes (client) and the messages they exchange (ipc), the pool that routes to them.

Nothing here imports torch or realtime_tts.gpu_worker: what runs inside a GPU worker process lives in
realtime_tts/gpu_worker/ (and realtime_tts/model/), and is only started from here, in its own process.
"""
