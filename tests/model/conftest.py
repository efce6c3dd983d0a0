"""Fixtures for the model tests: one tiny random checkpoint per session, loaded by our code and by the
reference `omnivoice` 0.2.1 (the parity oracle, a test-only dependency), both fp32 on CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from oracle import load_reference

from realtime_tts.model import OmniVoiceModel


@pytest.fixture(scope="session")
def ours(tiny_checkpoint: Path) -> OmniVoiceModel:
    return OmniVoiceModel.from_pretrained(tiny_checkpoint, dtype=torch.float32, device="cpu")


@pytest.fixture(scope="session")
def reference(tiny_checkpoint: Path) -> Any:
    return load_reference(tiny_checkpoint, torch.float32, "cpu")


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread() -> Any:
    """The tiny model's ops are far too small to share between threads; on a busy 2-core box OpenMP
    threads spinning against each other made these tests ~5x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
