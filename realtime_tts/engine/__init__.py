"""Engines: the Engine protocol (base), the CPU voice (cpu), the OmniVoice worker client (client), the pool.

The web process imports this package; nothing here may import torch (only engine/worker.py, which runs in its
own process, may).
"""
