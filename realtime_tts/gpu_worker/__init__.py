"""What runs inside one OmniVoice worker process (one per GPU): the worker loop (loop), the step scheduler
(scheduler, plain Python), the step runner with its device slots and CUDA graphs (runner, slots, codec_graphs)
and the Triton kernels (kernels/), over realtime_tts.model.

Never imported by the web process (tests/test_imports.py asserts it). Talks to the web process only through
realtime_tts.engine.ipc messages.
"""
